"""Cluster launch control (sm_100a): a dynamic persistent tile loop in CuTe DSL whose CTAs take over
the tiles of CTAs that have not launched yet (clusterlaunchcontrol.try_cancel / query_cancel).

PROVENANCE.yaml lists the files; clc_scale.py's docstring says what it computes and how to run it."""
