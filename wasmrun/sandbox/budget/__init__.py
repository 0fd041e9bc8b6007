"""A run's CPU and wall-clock budgets: the watchdog thread, and the alarm its sleepers wait on."""
