from .accelerate_schema import AccelerateConfig as AccelerateConfig
from .applicability import Applicability as Applicability
from .auto_fill import script_consumer as script_consumer
from .bounded import BoundsError as BoundsError
from .bounded import read_config_text as read_config_text
from .deepspeed_schema import DeepSpeedConfig as DeepSpeedConfig
from .editing import (
    FieldTextError as FieldTextError,
)
from .editing import (
    get_path as get_path,
)
from .editing import (
    remove_path as remove_path,
)
from .editing import (
    set_path as set_path,
)
from .editing import (
    text_from_value as text_from_value,
)
from .editing import (
    value_from_text as value_from_text,
)
from .messages import (
    Message as Message,
)
from .messages import (
    PathT as PathT,
)
from .messages import (
    format_path as format_path,
)
from .messages import (
    has_errors as has_errors,
)
from .messages import (
    sort_messages as sort_messages,
)
from .native import native_verdicts as native_verdicts
from .repair import repair_text as repair_text
from .schema import FieldSpec as FieldSpec
from .schema import Section as Section
from .schema import fields_of as fields_of
from .schema import form_keys as form_keys
from .source import Kind as Kind
from .source import SourceDocument as SourceDocument
from .source import load_file as load_file
from .source import parse_text as parse_text
from .validate import check_document as check_document
from .validate import check_documents as check_documents
from .validate import check_files as check_files
from .validate import load_for_check as load_for_check
