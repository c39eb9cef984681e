"""The roofline: the work model (FLOPs and bytes per kernel), the ceilings (datasheet, calibration), kernel metrics, power."""
