from . import paths as paths
from .durations import duration_text as duration_text
from .durations import rough_duration as rough_duration
from .fileio import atomic_write_text as atomic_write_text
from .fileio import read_json_file as read_json_file
from .paths import (
    accelerate_default_config as accelerate_default_config,
)
from .paths import (
    disk_full as disk_full,
)
from .paths import (
    free_bytes as free_bytes,
)
from .paths import (
    resources_dir as resources_dir,
)
from .paths import (
    run_store_path as run_store_path,
)
from .sizes import format_bytes as format_bytes
from .sizes import format_size as format_size
