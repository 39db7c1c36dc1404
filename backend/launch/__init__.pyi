from .builders import (
    ACCELERATE_CONFIG as ACCELERATE_CONFIG,
)
from .builders import (
    DS_CONFIG as DS_CONFIG,
)
from .builders import (
    DS_CONFIG_PLACEHOLDER as DS_CONFIG_PLACEHOLDER,
)
from .builders import (
    ENTRIES as ENTRIES,
)
from .builders import (
    LAUNCHERS as LAUNCHERS,
)
from .builders import (
    LaunchRequest as LaunchRequest,
)
from .builders import (
    accelerate_system_problems as accelerate_system_problems,
)
from .builders import (
    machine_bound as machine_bound,
)
from .environ import (
    is_secret_name as is_secret_name,
)
from .environ import (
    masked_env as masked_env,
)
from .environ import (
    python_problem as python_problem,
)
from .environ import (
    resolve_python as resolve_python,
)
from .plan import Entry as Entry
from .plan import Launcher as Launcher
from .plan import LaunchPlan as LaunchPlan
from .plan import default_run_name as default_run_name
from .plan import target_words as target_words
from .preview import (
    FREE_PORT as FREE_PORT,
)
from .preview import (
    RUN_ID as RUN_ID,
)
from .preview import (
    LaunchPreview as LaunchPreview,
)
from .preview import (
    preview_launch as preview_launch,
)
from .preview import (
    preview_plan as preview_plan,
)
from .probe import TrainingEnvironment as TrainingEnvironment
from .probe import probe_environment as probe_environment
