"""Files mdband reads and writes: trajectories, data sets, structures, models and run outputs.

The modules cover kinds of files (H5MD trajectories, deepmd-kit and dpdata systems, ASE and
LAMMPS structures, model files and checkpoints, logs and their plots) and file-level services
(atomic replacement, output locks, recovery of files left by a killed writer).
"""
