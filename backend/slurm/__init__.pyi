from .jobinfo import slurm_fields as slurm_fields
from .script import SlurmOptions as SlurmOptions
from .script import slurm_plan as slurm_plan
