"""Memory: peaks per device and step, what was live at them, and out-of-memory errors."""
