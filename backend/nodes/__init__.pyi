from .hostfile import (
    HostfileError as HostfileError,
)
from .hostfile import (
    HostRow as HostRow,
)
from .hostfile import (
    host_rows as host_rows,
)
from .hostfile import (
    parse_hostfile_text as parse_hostfile_text,
)
from .hostfile import (
    read_hostfile as read_hostfile,
)
from .hostfile import (
    read_hostfile_text as read_hostfile_text,
)
from .hostfile import (
    row_problems as row_problems,
)
from .hostfile import (
    save_edited_hostfile as save_edited_hostfile,
)
from .launching import preflight_checks as preflight_checks
from .preflight import Check as Check
from .preflight import Target as Target
from .preflight import check_hosts as check_hosts
from .preflight import failed as failed
