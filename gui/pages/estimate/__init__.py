"""Estimate: memory per strategy for a model on a machine, the advisor's choice, and "Use this" to edit it as a preset.

The page assembles three panels: the form (inputs_panel), the results table with what it assumed (results_panel) and
the recommendation with "Use this" (advice_panel). It only presents `traindeck.backend.estimate`: the form's text
goes to `check_form` (instant, names the bad field), the estimate runs on the thread pool, a model config is counted
by the backend in a child process (torch and transformers never load in the window), and NVML is asked for the GPUs
off the UI thread. The training fields follow the preset being edited (`ctx.draft`) where the user has not set them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QKeyCombination, QObject, Qt, QTimer
from PySide6.QtGui import QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QFrame, QLineEdit, QScrollArea, QSplitter, QVBoxLayout, QWidget

from traindeck.backend.estimate import (
    DetectedMachine,
    Estimate,
    EstimateForm,
    InputProblem,
    ModelShape,
    check_form,
    counted_shape,
    detect_machine,
    estimate_form,
    preset_workload,
)
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.estimate.advice_panel import AdvicePanel
from traindeck.gui.pages.estimate.inputs_panel import EstimateInputs
from traindeck.gui.pages.estimate.results_panel import EstimateResults

DEBOUNCE_MS = 250


@dataclass
class _Outcome:
    """What a background estimate hands back: the estimate, or the problem naming a field."""

    estimate: Estimate | None = None
    problem: InputProblem | None = None


def _estimate(form: EstimateForm, counted: ModelShape | None) -> _Outcome:
    try:
        return _Outcome(estimate=estimate_form(form, counted))
    except InputProblem as exc:
        return _Outcome(problem=exc)


def _count(config: str) -> ModelShape | InputProblem:
    try:
        return counted_shape(config)
    except InputProblem as exc:
        return exc


class EstimatePage(Page):
    key = "estimate"
    title = "Estimate"
    order = 50

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.estimate: Estimate | None = None
        self.problems: list[InputProblem] = []
        self.detected: DetectedMachine | None = None
        self.detection_finished = False
        self._estimates = ctx.tasks.lane()  # only the newest edit's estimate is shown
        self._counted: dict[str, ModelShape] = {}
        self._count_failed: dict[str, InputProblem] = {}
        self._counting: str | None = None
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.recompute)
        self._build()
        if not ctx.demo:
            self.inputs.restore(ctx.settings)
            self._follow_preset()
            ctx.draft.changed.connect(self._follow_preset)
        self.recompute()
        ctx.tasks.run(detect_machine, done=self._machine_detected, failed=self._detection_failed)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent) \
                and event.keyCombination() == QKeyCombination(Qt.KeyboardModifier.ControlModifier, Qt.Key.Key_U):
            event.ignore()  # not the field's: the page's Use this shortcut takes it
            return True
        return super().eventFilter(watched, event)

    def _build(self) -> None:
        self.inputs = EstimateInputs()
        self.inputs.edited.connect(self._debounce.start)
        self.inputs.config_committed.connect(self._model_config_committed)
        self.results = EstimateResults()
        self.results.try_setups.connect(self.try_setups)
        self.advice = AdvicePanel(self.ctx)
        shortcut = QShortcut(QKeySequence("Ctrl+U"), self)
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(self.advice.use_advice)
        # On X11 a text field claims Ctrl+U ("delete to the line's start") before the page's shortcut: the field
        # being typed in was emptied and Use this never ran. The fields let Ctrl+U go to the page.
        for field in self.inputs.findChildren(QLineEdit):
            field.installEventFilter(self)

        # Right: problems, the table, what was assumed, then the advice, which takes the rest and scrolls. When
        # the window is too low for the table and its notes, the whole column scrolls: nothing is drawn over.
        right = QWidget()
        side = QVBoxLayout(right)
        side.setContentsMargins(6, 0, 0, 0)
        side.addWidget(self.results)
        self.advice.setMinimumHeight(8 * self.fontMetrics().lineSpacing())
        side.addWidget(self.advice, 1)
        self.results_scroll = QScrollArea()
        self.results_scroll.setWidget(right)
        self.results_scroll.setWidgetResizable(True)
        self.results_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.results_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

        splitter = QSplitter()
        splitter.addWidget(self.inputs)
        splitter.addWidget(self.results_scroll)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([440, 840])  # the form: room for a model config's path
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

    # ------------------------------------------------------------------------------------------------ input
    def try_setups(self, stages: list[int], offloads: list[str]) -> QWidget:
        """"Try these setups…": the trial dialog with the table's stages and offloads, for the Launch page's launch;
        its results open once it starts."""
        from traindeck.gui.widgets.trial_dialog import TrialDialog, request_from_context
        from traindeck.gui.widgets.trial_results import TrialResults

        model = self.estimate.model_size if self.estimate is not None else None
        dialog = TrialDialog(self.ctx, lambda: request_from_context(self.ctx), stages=stages, offloads=offloads,
                             model_size=model, parent=self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.started.connect(lambda trial_id, pid: TrialResults(self.ctx, trial_id, pid, parent=self).show())
        dialog.open()
        return dialog

    def _model_config_committed(self, config: str, force: bool) -> None:
        if force:  # picked again: count again (the file may have changed)
            self._counted.pop(config, None)
        self._count_failed.pop(config, None)
        self.recompute()

    def _follow_preset(self) -> None:
        """The training fields from the preset being edited (loaded, chosen or edited on Configure)."""
        draft = self.ctx.draft
        if draft.preset is None:
            self.inputs.follow_preset(None, {})
            return
        self.inputs.follow_preset(draft.saved_as or draft.preset.name, preset_workload(draft.preset))

    def _detection_failed(self, error: str) -> None:
        self.detection_finished = True
        self.inputs.machine_unknown(error)

    def _machine_detected(self, detected: DetectedMachine) -> None:
        self.detected = detected
        self.detection_finished = True
        self.inputs.machine_detected(detected)

    # ------------------------------------------------------------------------------------------------ compute
    def recompute(self) -> None:
        """Check the form now; estimate in the background (counting a model config first when needed)."""
        self._debounce.stop()
        self._estimates.invalidate()  # an older edit's estimate still on its way is dropped
        if not self.ctx.demo:
            self.inputs.save_settings(self.ctx.settings)
        form = self.inputs.form()
        _, problems = check_form(form)
        config = form.model_config.strip()
        if not problems and config in self._count_failed:
            problems = [self._count_failed[config]]
        self._show_problems(problems)
        if problems:
            return
        counted = self._counted.get(config) if config else None
        if config and counted is None:
            self.results.show_note(f"Counting the parameters of {config} (a child process builds the model on the "
                                   "meta device; this can take a while)…")
            if self._counting != config:
                self._counting = config
                self.ctx.tasks.run(_count, config, done=functools.partial(self._config_counted, config),
                                   failed=functools.partial(self._config_not_counted, config))
            return
        self._estimates.run(_estimate, form, counted, done=self._estimated, failed=self._estimate_failed)

    def _config_not_counted(self, config: str, error: str) -> None:
        self._config_counted(config, InputProblem("model_config", f"Model config: {error}"))

    def _config_counted(self, config: str, result: ModelShape | InputProblem) -> None:
        if self._counting == config:
            self._counting = None
        if isinstance(result, InputProblem):
            self._count_failed[config] = result
        else:
            self._counted[config] = result
        if config == self.inputs.model_config_text:
            self.recompute()

    def _estimate_failed(self, error: str) -> None:
        self._estimated(_Outcome(problem=InputProblem("", f"The estimate failed: {error}")))

    def _estimated(self, outcome: _Outcome) -> None:
        if outcome.problem is not None:
            self._show_problems([outcome.problem])
            return
        self._show_problems([])
        self.estimate = outcome.estimate
        if self.estimate is not None:
            self.results.show_estimate(self.estimate)
            self.advice.show_advice(self.estimate)

    def _show_problems(self, problems: list[InputProblem]) -> None:
        self.problems = list(problems)
        self.inputs.mark_problems(self.problems)
        self.results.show_problems(self.problems)
        self.advice.set_blocked(bool(self.problems))

    # ------------------------------------------------------------------------------------------------ hooks
    def page_shown(self) -> None:
        focus = QApplication.focusWidget()
        # The page list kept the focus, or the page that hid passed it on to the scroll area around the fields:
        # keys typed after Ctrl+5 go to the model's size, the first thing to give.
        if focus is None or not self.isAncestorOf(focus) or isinstance(focus, QScrollArea):
            self.inputs.params.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def load_demo(self) -> None:
        """A 1.5B model on one 24 GiB GPU and 64 GiB of RAM: needs optimizer offload."""
        self.inputs.fill_demo()
        self.recompute()

    def shutdown(self) -> None:
        if self._debounce.isActive() and not self.ctx.demo:
            self.inputs.save_settings(self.ctx.settings)  # the last edit, not estimated yet
        self._debounce.stop()


PAGE = EstimatePage
