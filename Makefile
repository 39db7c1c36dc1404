# The two newcomer commands:  `make demo` (set up + open the dashboard with the demo)  and  `make test`.
# Everything lands in .venv; re-running only reinstalls when pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# CPU torch first: a bare `torch` requirement would pull several GB of CUDA packages. On a GPU workstation:
#   make demo TORCH_SPEC="torch==2.13.0"   (with your CUDA index configured in pip)
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.traindeck-installed

# Tests, benchmarks and `make icons` draw offscreen where there is no display (`make demo` refuses instead).
export QT_QPA_PLATFORM ?= $(if $(DISPLAY)$(WAYLAND_DISPLAY),,offscreen)
# DeepSpeed JIT-builds its CPU ops on first use (2-6 min): `setup` builds them once, into the training interpreter's
# own folder (~/.cache/traindeck/torch_extensions/<interpreter+torch>), where runs and tests find them. A
# TORCH_EXTENSIONS_DIR you set yourself is used instead.

.PHONY: demo test test-machines test-acceptance test-fast setup setup-core check-setup lint bench soak clean frozen icons install-desktop uninstall-desktop tour docs gpu-check

# Refuses at once, before any set-up, where no window could be seen (no DISPLAY / WAYLAND_DISPLAY) or Qt could not
# open one (X11 libraries missing: the exact apt-get line is printed). Ctrl+C closes the window.
demo:
	@$(PYTHON) backend/system_check.py demo
	@$(MAKE) --no-print-directory $(STAMP)
	$(BIN)/traindeck gui --demo

# The tests in tiers (tests/unit, tests/gui, tests/launch: real supervised runs, tests/system: packaging, a fresh
# set-up, what needs no server; tests/perf: the benchmarks' smoke forms), side by side on TEST_JOBS workers: real runs mostly wait on
# their processes, so more workers than cores pays. The 30 slowest tests are printed. The benchmarks themselves
# print tables: `make bench`.
TEST_JOBS ?= 3
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) -m "not machines and not acceptance" --durations=30

# The tests that use the session's sshd, pdsh nodes or Slurm (marker `machines`), on one worker: their servers are
# one per session, on fixed loopback ports, and need root with openssh-server, pdsh and Slurm's packages (without
# them each test is skipped and says why). CI installs those and runs this after `make test`.
test-machines: $(STAMP)
	$(BIN)/python -m pytest -q -m machines --durations=10

# The long acceptance runs of whole capabilities (trials, ZeRO-Infinity, the collectives ledger, step timing on real
# DeepSpeed runs, ...: tests/conftest.py ACCEPTANCE), a minute or more each; CI runs them after `make test`.
test-acceptance: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) -m "acceptance and not machines" --durations=15

# Everything without a real run, a server or a benchmark: unit and GUI tests, for the edit-test loop (< 2 min).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) -m "not launch and not system and not perf" tests/unit tests/gui

setup: $(STAMP)

# python3 with venv and a C++ compiler (DeepSpeed's ops), said with the apt-get line before anything downloads.
check-setup:
	@$(PYTHON) backend/system_check.py setup

# setuptools prints an "Editable installation ... folders with the same name as your package" notice on every
# editable install of a layout like ours (the repository root is the package): information, not a problem here.
$(STAMP): export PYTHONWARNINGS = ignore:Editable installation:UserWarning
$(STAMP): pyproject.toml | check-setup
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip "setuptools>=68" wheel
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[train,test]"
	$(BIN)/python -m traindeck.backend.launch.prebuild_ops
	touch $(STAMP)

# The dashboard alone, without torch/accelerate/deepspeed.
setup-core:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[test]"

# mypy names modules after folders and the repository root is the package `traindeck`: a checkout named otherwise
# (a worktree, traindeck-main) is type-checked through a link named traindeck in a folder outside the checkout
# (inside it, mypy follows the link back to the real folder name).
TYPECHECK_DIR ?= $(or $(TMPDIR),/tmp)/traindeck-typecheck-$(shell printf %s "$(CURDIR)" | cksum | cut -d" " -f1)
lint: $(STAMP)
	$(BIN)/ruff check backend gui tests
	$(BIN)/lint-imports
	@mkdir -p "$(TYPECHECK_DIR)" && ln -sfn "$(CURDIR)" "$(TYPECHECK_DIR)/traindeck"
	cd "$(TYPECHECK_DIR)" && "$(CURDIR)/$(BIN)/mypy" --cache-dir "$(CURDIR)/.mypy_cache" --config-file traindeck/pyproject.toml traindeck/backend traindeck/gui

# The dashboard as a person sees it: the real window under Xvfb (a real X server), the demo driven end to end
# (launch, live run, stop, a second run, History's comparison, dark theme), one screenshot per step in build/tour.
# Needs xvfb, xauth and Qt's xcb libraries (see tests/gui/xvfb_tour.py); `make tour README=1` also replaces
# resources/screenshots/*.png.
tour: $(STAMP)
	$(BIN)/python -m tests.gui.xvfb_tour build/tour $(if $(README),--readme,)

# The soak (a window watching a run for 30 min) is not part of `make bench`: `make soak`, or with --minutes.
bench: $(STAMP)
	for b in tests/perf/bench_*.py; do case $$b in *soak*) continue;; esac; echo "== $$b"; $(BIN)/python $$b || exit 1; done

soak: $(STAMP)
	$(BIN)/python tests/perf/bench_gui_soak.py

# The documentation site (mkdocs.yml, docs/) into site/, every warning an error; the command-line reference is
# generated from the argparse parsers at build time (docs/hooks/cli_reference.py). Installs the `docs` extra first
# where mkdocs is missing.
docs: export PYTHONWARNINGS = ignore:Editable installation:UserWarning
docs: export NO_MKDOCS_2_WARNING = 1
docs:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/mkdocs || $(BIN)/python -m pip install -q -e ".[docs]"
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The GPU acceptance check, for the rare day a GPU machine is lent (tests/gpu/acceptance.sh: NVML sampling, a CUDA
# ZeRO-2 + CPU-offload run, the estimate against the measured peak, a CUDA OOM diagnosed, `stop` freeing the GPU).
# Here it gathers what that machine lacks into .gpu/ (wheels from GPU_WHEELS, else downloaded or built for Python
# 3.12), checks that what travels stays under the device tool's 64 MiB, dry-runs the check (no GPU here: it says so
# in one line) and prints the device call to make. Needs only $(PYTHON) and its pip, not the .venv.
# TRAINDECK_GPU_DRIVER=steps_check.py make gpu-check: the same for the step-timing check (tests/gpu/steps_check.py:
# step timing's cost on CUDA ZeRO-2 and FSDP2 steps, the offloaded step's anatomy); its dry run also says what it
# would run and how long each row is expected to take.
GPU_WHEELS ?= ../shared/gpu/wheels
GPU_STEPS := $(filter steps_check.py,$(TRAINDECK_GPU_DRIVER))
GPU_CALL := $(if $(GPU_STEPS),TRAINDECK_GPU_DRIVER=steps_check.py TRAINDECK_GPU_BUDGET_S=410 bash tests/gpu/acceptance.sh,bash tests/gpu/acceptance.sh)
GPU_TABLE := $(if $(GPU_STEPS),gpu-steps.md,gpu-acceptance.md)
gpu-check:
	$(PYTHON) tests/gpu/prepare.py --kit "$(GPU_WHEELS)"
	$(if $(GPU_STEPS),TRAINDECK_GPU_DRIVER=steps_check.py TRAINDECK_GPU_BUDGET_S=410 )bash tests/gpu/acceptance.sh
	@echo 'next, on a lent GPU machine (one call, from this checkout): device run with command'
	@echo '  `$(GPU_CALL)`, carry [".gpu"], timeout_s 540; the table comes back as $(GPU_TABLE)'

# ---- the desktop app (docs/desktop-app.md) ---------------------------------------------------------------------
# dist/traindeck/traindeck: one folder, the dashboard and the command line without a Python install. Training
# still runs in the Python the user picks (with torch); the bundle never contains torch/DeepSpeed/accelerate.
# Needs only the dashboard's own dependencies (not the train extra).
frozen:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[packaging]"
	$(BIN)/pyinstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/traindeck.spec
	dist/traindeck/traindeck --version

# The PNG icons are committed; re-render them after editing packaging/icons/traindeck.svg.
icons:
	$(BIN)/python packaging/make_icons.py

# Menu entry, icon and AppStream metainfo for this user (~/.local/share). EXEC: what the menu starts, e.g.
#   make install-desktop EXEC=dist/traindeck/traindeck   (default: `traindeck` on PATH)
install-desktop:
	sh packaging/install_desktop.sh $(if $(EXEC),--exec "$(EXEC)")

uninstall-desktop:
	sh packaging/install_desktop.sh --uninstall
