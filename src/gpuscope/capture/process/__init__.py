"""The profiled process: starting it (launch, bootstrap, ncu replay), its agent, and its capture window."""
