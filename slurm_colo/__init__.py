"""slurm-colo: compatibility-aware GPU co-location for Slurm."""

__version__ = "0.1.0"
