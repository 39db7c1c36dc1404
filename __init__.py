"""traindeck: configure, launch and watch Accelerate/DeepSpeed training runs on your workstation."""

__version__ = "0.1.0"
