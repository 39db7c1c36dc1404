from .files import (
    builtin_dir as builtin_dir,
)
from .files import (
    delete_preset as delete_preset,
)
from .files import (
    list_presets as list_presets,
)
from .files import (
    load_builtin as load_builtin,
)
from .files import (
    load_preset as load_preset,
)
from .files import (
    preset_names as preset_names,
)
from .files import (
    rename_preset as rename_preset,
)
from .files import (
    save_preset as save_preset,
)
from .model import (
    BUILTIN_NAMES as BUILTIN_NAMES,
)
from .model import (
    LAUNCHERS as LAUNCHERS,
)
from .model import (
    NVME_PLACEHOLDER as NVME_PLACEHOLDER,
)
from .model import (
    PRESET_FILE_SUFFIX as PRESET_FILE_SUFFIX,
)
from .model import (
    SCHEMA_VERSION as SCHEMA_VERSION,
)
from .model import (
    Preset as Preset,
)
from .model import (
    PresetError as PresetError,
)
from .model import (
    check_env as check_env,
)
from .model import (
    check_name as check_name,
)
from .model import (
    dump_preset as dump_preset,
)
from .model import (
    preset_from_mapping as preset_from_mapping,
)
from .model import (
    preset_to_mapping as preset_to_mapping,
)
from .model import (
    read_preset_file as read_preset_file,
)
from .native import native_preset_verdicts as native_preset_verdicts
from .secrets import find_secrets as find_secrets
from .secrets import looks_like_secret_key as looks_like_secret_key
from .sources import (
    ConfigText as ConfigText,
)
from .sources import (
    blank_accelerate as blank_accelerate,
)
from .sources import (
    blank_deepspeed as blank_deepspeed,
)
from .sources import (
    blank_preset as blank_preset,
)
from .sources import (
    examine_text as examine_text,
)
from .sources import (
    free_name as free_name,
)
from .sources import (
    read_config_file as read_config_file,
)
from .transfer import (
    LISTED_SLIPS as LISTED_SLIPS,
)
from .transfer import (
    export_preset as export_preset,
)
from .transfer import (
    export_summary as export_summary,
)
from .transfer import (
    import_accelerate_default as import_accelerate_default,
)
from .transfer import (
    import_preset as import_preset,
)
from .transfer import (
    preset_file_name as preset_file_name,
)
from .transfer import (
    render_files as render_files,
)
from .validation import validate_preset as validate_preset
