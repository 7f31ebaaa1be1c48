"""Runtime code of the device gateway's own functions."""
