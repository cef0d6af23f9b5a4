"""A register-pressure kernel built at several register caps, and setmaxnreg shapes (pressure.cu, setmaxnreg.cu, registers.py)."""
