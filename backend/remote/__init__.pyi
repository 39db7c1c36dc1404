from .forward import run_remote as run_remote
from .forward import start_stdin_watch as start_stdin_watch
from .runs import RemoteRuns as RemoteRuns
from .runs import in_source as in_source
from .session import Session as Session
from .ssh import RemoteError as RemoteError
from .ssh import Target as Target
