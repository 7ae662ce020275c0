"""Training backends: `skyrl` (SkyRL on a Ray GPU cluster) and `local` (TRL on one node); both read TrainerConfig."""
