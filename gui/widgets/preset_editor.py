"""Editing one preset in place: launcher, process count, description, and the generated forms of its accelerate and
DeepSpeed configs, showing only the settings that apply to the chosen engine and ZeRO stage.

Every change is made to the Preset object itself (the forms edit its dicts in place) and announced with `edited`;
whoever owns the preset marks it changed and validates it. Settings that do not apply stay in the preset, hidden
(the Show menu brings them back); a setting a validation message is about is always shown, so its message is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QStackedWidget,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.config import (
    AccelerateConfig,
    Applicability,
    DeepSpeedConfig,
    FieldSpec,
    Kind,
    Message,
    PathT,
    format_path,
    get_path,
)
from traindeck.backend.presets import LAUNCHERS, Preset, blank_accelerate, blank_deepspeed
from traindeck.gui.widgets.config_form import ConfigForm, note_style

SECTIONS = ("accelerate", "deepspeed")
GENERAL = ("launcher", "num_processes", "description")
SHOW_APPLIES, SHOW_SET, SHOW_ALL = "applies", "set", "all"

_LAUNCHER_HELP = {
    "accelerate": "accelerate launch: reads the accelerate config (and the DeepSpeed config, when there is one)",
    "deepspeed": "the deepspeed launcher: starts the ranks itself and reads only the DeepSpeed config",
    "python": "plain python (torchrun for several processes): your script reads any config itself",
    "torchrun": "torchrun: starts the processes with their rank variables; your script sets up its own process "
                "group and sharding (native DDP or FSDP)",
}
_SECTION_WORDS = {
    "accelerate": ("accelerate config", "accelerate_config.yaml: how `accelerate launch` starts and sets up "
                                        "the processes"),
    "deepspeed": ("DeepSpeed config", "ds_config.json: ZeRO stage, offload, precision and batch sizes for "
                                      "DeepSpeed"),
}
_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def parse_path(text: str) -> PathT:
    """The inverse of format_path: "a.b[0].c" -> ("a", "b", 0, "c")."""
    return tuple(int(index) if index else name for index, name in _PATH_PART.findall(text))


class _SectionTab(QWidget):
    """One config section: its form in a scroll area, or a placeholder offering to add the section."""

    def __init__(self, section: str, form: ConfigForm, editor: PresetEditor):
        super().__init__()
        title, about = _SECTION_WORDS[section]
        self.form = form
        self.stack = QStackedWidget()

        empty = QWidget()
        empty_layout = QVBoxLayout(empty)
        self.empty_label = QLabel(f"This preset has no {title}.")
        self.empty_label.setWordWrap(True)
        self.add_button = QPushButton(f"Add a {title}")
        self.add_button.setObjectName(f"add:{section}")
        self.add_button.clicked.connect(lambda: editor.add_section(section))
        empty_layout.addWidget(self.empty_label)
        empty_layout.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignLeft)
        empty_layout.addStretch(1)

        full = QWidget()
        full_layout = QVBoxLayout(full)
        full_layout.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        about_label = QLabel(about)
        about_label.setWordWrap(True)
        about_label.setEnabled(False)  # secondary text
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName(f"remove:{section}")
        self.remove_button.setToolTip(f"Remove the {title} from this preset")
        self.remove_button.clicked.connect(lambda: editor.remove_section(section))
        head.addWidget(about_label, 1)
        head.addWidget(self.remove_button)
        full_layout.addLayout(head)
        self.scroller = QScrollArea()
        self.scroller.setWidgetResizable(True)
        self.scroller.setWidget(form)
        self.scroller.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        full_layout.addWidget(self.scroller, 1)

        self.stack.addWidget(empty)
        self.stack.addWidget(full)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addWidget(self.stack)

    def show_form(self, on: bool) -> None:
        self.stack.setCurrentIndex(1 if on else 0)


class PresetEditor(QWidget):
    edited = Signal()  # the user changed the preset (in place)
    input_rejected = Signal()  # typed text that is not a value (see input_errors)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._preset: Preset | None = None
        self._updating = False
        self._message_paths: dict[str, set[str]] = {s: set() for s in SECTIONS}
        self._spare: dict[str, dict] = {s: {} for s in SECTIONS}  # what a form edits while its section is absent

        # ---- launch settings
        self.launcher = QComboBox()
        self.launcher.setObjectName("launcher")
        for index, name in enumerate(LAUNCHERS):
            self.launcher.addItem(name)
            self.launcher.setItemData(index, _LAUNCHER_HELP[name], Qt.ItemDataRole.ToolTipRole)
        self.launcher.setToolTip("How the training processes are started:\n" + "\n".join(
            f"{k}: {v}" for k, v in _LAUNCHER_HELP.items()))
        self.launcher.currentIndexChanged.connect(self._launcher_changed)
        self.processes = QSpinBox()
        self.processes.setObjectName("num_processes")
        self.processes.setRange(0, 4096)
        self.processes.setMinimumWidth(self.processes.fontMetrics().horizontalAdvance("auto (9999)") + 36)
        self.processes.valueChanged.connect(self._processes_changed)
        self.description = QLineEdit()
        self.description.setObjectName("description")
        self.description.setPlaceholderText("when to use this preset, in one line")
        self.description.setToolTip("One line saying when to use this preset (shown in the preset list)")
        self.description.textEdited.connect(self._description_changed)
        self._general_notes: dict[str, QLabel] = {}
        general = QFormLayout()
        general.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        row = QHBoxLayout()
        row.addWidget(self.launcher, 1)
        processes_label = QLabel("Processes")
        processes_label.setToolTip("Processes (ranks) to start on this machine, usually one per GPU")
        row.addSpacing(12)
        row.addWidget(processes_label)
        row.addWidget(self.processes)
        launcher_column = self._with_note("launcher", row, extra=("num_processes",))
        general.addRow("Launcher", launcher_column)
        general.addRow("Description", self._with_note("description", self.description))

        # ---- what to show
        self.search = QLineEdit()
        self.search.setObjectName("find")
        self.search.setPlaceholderText("Find a setting…")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Show only the settings whose name or help contains this text")
        self.search.textChanged.connect(lambda _t: self.apply_filters())
        self.show_mode = QComboBox()
        self.show_mode.setObjectName("showMode")
        for text, mode, tip in (
                ("Settings that apply", SHOW_APPLIES, "Hide settings that have no effect with this engine, ZeRO "
                                                      "stage and offload choice"),
                ("Settings that are set", SHOW_SET, "Only the keys written in the preset"),
                ("All settings", SHOW_ALL, "Every key the tools know")):
            self.show_mode.addItem(text, mode)
            self.show_mode.setItemData(self.show_mode.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.show_mode.currentIndexChanged.connect(lambda _i: self.apply_filters())
        filter_row = QHBoxLayout()
        filter_row.addWidget(self.search, 1)
        filter_row.addWidget(self.show_mode)

        # ---- the two config forms (built once; a new preset rebinds them)
        self.forms: dict[Kind, ConfigForm] = {
            "accelerate": ConfigForm(AccelerateConfig, self._spare["accelerate"]),
            "deepspeed": ConfigForm(DeepSpeedConfig, self._spare["deepspeed"]),
        }
        self.tabs = QTabWidget()
        self.tabs.setObjectName("sectionTabs")
        self.section_tabs: dict[str, _SectionTab] = {}
        for section, form in self.forms.items():
            form.setObjectName(f"form:{section}")
            for layout in [form.layout(), *form.findChildren(QFormLayout)]:
                if isinstance(layout, QFormLayout):  # long key names: the field goes under its label
                    layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
            form.edited.connect(self._form_edited)
            form.input_rejected.connect(self.input_rejected)
            tab = _SectionTab(section, form, self)
            self.section_tabs[section] = tab
            self.tabs.addTab(tab, _SECTION_WORDS[section][0])

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(general)
        layout.addLayout(filter_row)
        layout.addWidget(self.tabs, 1)

    def _with_note(self, key: str, content: QWidget | QHBoxLayout, extra: tuple[str, ...] = ()) -> QWidget:
        column = QWidget()
        column_layout = QVBoxLayout(column)
        column_layout.setContentsMargins(0, 0, 0, 0)
        if isinstance(content, QWidget):
            column_layout.addWidget(content)
        else:
            column_layout.addLayout(content)
        for name in (key, *extra):
            note = QLabel()
            note.setWordWrap(True)
            note.hide()
            column_layout.addWidget(note)
            self._general_notes[name] = note
        return column

    # -------------------------------------------------------------------------------------------- model -> view

    @property
    def preset(self) -> Preset | None:
        return self._preset

    def set_preset(self, preset: Preset) -> None:
        """Edit `preset` from now on (the forms are rebound, not rebuilt)."""
        self._preset = preset
        self._message_paths = {s: set() for s in SECTIONS}
        self._spare = {s: {} for s in SECTIONS}
        self.refresh()

    def refresh(self) -> None:
        """Show the preset's values again (after it was changed elsewhere)."""
        preset = self._preset
        if preset is None:
            return
        self._updating = True
        try:
            self.launcher.setCurrentIndex(max(0, LAUNCHERS.index(preset.launcher)) if preset.launcher in LAUNCHERS
                                          else 0)
            self._update_processes_text()
            self.processes.setValue(preset.num_processes or 0)
            if self.description.text() != preset.description:
                self.description.setText(preset.description)
                self.description.setCursorPosition(0)  # a long description shows its beginning
            for section, form in self.forms.items():
                data = getattr(preset, section)
                if data is None:  # the form edits nothing visible meanwhile; kept for "Add"
                    data = self._spare[section]
                if form.data is data:
                    form.refresh()
                else:
                    form.set_data(data)
                self.section_tabs[section].show_form(getattr(preset, section) is not None)
                self.section_tabs[section].remove_button.setEnabled(True)
            # The accelerate tab only matters when accelerate launches, or when the preset carries that config.
            self.tabs.setTabVisible(self.tabs.indexOf(self.section_tabs["accelerate"]),
                                    preset.launcher == "accelerate" or preset.accelerate is not None)
        finally:
            self._updating = False
        self.apply_filters()

    def _update_processes_text(self) -> None:
        preset = self._preset
        if preset is None:
            return
        if preset.launcher == "accelerate":
            count = (preset.accelerate or {}).get("num_processes")
            count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
            self.processes.setSpecialValueText(f"auto ({count})")
            self.processes.setToolTip("Processes (ranks) on this machine, usually one per GPU; auto: the accelerate "
                                      "config's num_processes")
        else:
            self.processes.setSpecialValueText("auto (1)")
            self.processes.setToolTip("Processes (ranks) on this machine, usually one per GPU; auto: 1")

    # -------------------------------------------------------------------------------------------- view -> model

    def _launcher_changed(self, index: int) -> None:
        if self._updating or self._preset is None:
            return
        preset = self._preset
        preset.launcher = LAUNCHERS[index]
        # A new preset's accelerate section is a template nobody edited: under another launcher it is only a
        # source of warnings (and of an exported accelerate_config.yaml nobody asked for), so it is set aside
        # (Add brings it back), and back under accelerate it returns by itself.
        if preset.launcher != "accelerate" and _untouched_accelerate(preset.accelerate):
            self._spare["accelerate"], preset.accelerate = preset.accelerate or {}, None
        elif preset.launcher == "accelerate" and preset.accelerate is None \
                and _untouched_accelerate(self._spare["accelerate"]):
            self._spare["accelerate"], preset.accelerate = {}, blank_accelerate(preset.deepspeed is not None)
        self.refresh()
        self.edited.emit()

    def _processes_changed(self, value: int) -> None:
        if self._updating or self._preset is None:
            return
        self._preset.num_processes = value or None
        self.edited.emit()

    def _description_changed(self, text: str) -> None:
        if self._updating or self._preset is None:
            return
        self._preset.description = text
        self.edited.emit()

    def _form_edited(self) -> None:
        self._update_processes_text()
        self.apply_filters()  # a stage, device or engine choice changes what applies
        self.edited.emit()

    def add_section(self, section: str) -> None:
        preset = self._preset
        if preset is None or getattr(preset, section) is not None:
            return
        spare = self._spare[section]
        if section == "accelerate":
            data = spare or blank_accelerate(preset.deepspeed is not None)
            if _untouched_accelerate(data):
                data = blank_accelerate(preset.deepspeed is not None)
        else:
            data = spare or blank_deepspeed(preset.launcher)
            if _untouched_accelerate(preset.accelerate, deepspeed=False):
                # accelerate reads a DeepSpeed config only with distributed_type DEEPSPEED: the untouched
                # template follows, so the DeepSpeed config added is the one the run uses.
                preset.accelerate = blank_accelerate(True)
        setattr(preset, section, data)
        self.refresh()
        self.tabs.setCurrentWidget(self.section_tabs[section])
        self.edited.emit()

    def remove_section(self, section: str) -> None:
        preset = self._preset
        if preset is None or getattr(preset, section) is None:
            return
        title = _SECTION_WORDS[section][0]
        answer = QMessageBox.question(
            self, f"Remove the {title}?",
            f"Remove the {title} from this preset? Its settings stay available until you switch presets, and "
            "nothing is written until you save.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Cancel)
        if answer != QMessageBox.StandardButton.Yes:
            return
        self._spare[section] = getattr(preset, section)  # "Add" brings these settings back
        setattr(preset, section, None)
        self.refresh()
        self.edited.emit()

    # -------------------------------------------------------------------------------------------- messages

    def show_messages(self, messages: Iterable[Message]) -> None:
        """Each message beside its setting: launch settings here, config keys in their form."""
        by_section: dict[str, list[Message]] = {s: [] for s in SECTIONS}
        general: dict[str, list[Message]] = {}
        for message in messages:
            head, _, rest = message.path.partition(".")
            if head in SECTIONS and rest:
                by_section[head].append(dataclasses.replace(message, path=rest))
            elif message.path in GENERAL:
                general.setdefault(message.path, []).append(message)
        for key, note in self._general_notes.items():
            found = general.get(key, [])
            worst = "error" if any(m.severity == "error" for m in found) else "warning" if found else None
            note.setText("\n".join(m.message for m in found))
            note.setStyleSheet(note_style(worst, note))
            note.setVisible(bool(found))
        style = self.style()
        for section, form in self.forms.items():
            found = by_section[section]
            form.show_messages(found)
            self._message_paths[section] = {m.path for m in found}
            worst = "error" if any(m.severity == "error" for m in found) else "warning" if found else None
            icon = {"error": QStyle.StandardPixmap.SP_MessageBoxCritical,
                    "warning": QStyle.StandardPixmap.SP_MessageBoxWarning}.get(worst or "")
            index = self.tabs.indexOf(self.section_tabs[section])
            self.tabs.setTabIcon(index, style.standardIcon(icon) if icon is not None else QIcon())
            title = _SECTION_WORDS[section][0]
            self.tabs.setTabText(index, f"{title} ({len(found)})" if found else title)
        self.apply_filters()

    def note_text(self, path: str) -> str:
        """The message shown beside the setting at `path` ("deepspeed.train_batch_size", "launcher")."""
        if path in self._general_notes:
            return self._general_notes[path].text()
        parts = parse_path(path)
        if not parts or parts[0] not in self.forms:
            return ""
        form = self.forms["accelerate" if parts[0] == "accelerate" else "deepspeed"]
        for depth in range(1, len(parts) - 1):  # down to the section holding the key
            form = form.child(str(parts[depth]))
        return form.note_text(str(parts[-1]))

    def input_errors(self) -> list[Message]:
        """Typed text that is not a value, as errors on the preset's paths."""
        out = []
        for section, form in self.forms.items():
            if getattr(self._preset, section, None) is not None:
                out += [dataclasses.replace(m, path=f"{section}.{m.path}") for m in form.input_errors()]
        return out

    # -------------------------------------------------------------------------------------------- what is shown

    def apply_filters(self) -> None:
        preset = self._preset
        if preset is None:
            return
        query = self.search.text().strip().lower()
        mode = self.show_mode.currentData()
        for section, form in self.forms.items():
            data = getattr(preset, section)
            if data is None:
                continue
            rules = Applicability(section, data, preset.deepspeed if section == "accelerate" else None)
            flagged = self._message_paths[section]

            def visible(path: PathT, spec: FieldSpec, data=data, rules=rules, flagged=flagged) -> bool:
                dotted = format_path(path)
                if spec.kind != "section" and query and not (
                        any(query in str(part).lower() for part in path) or query in spec.help.lower()):
                    return False
                if dotted in flagged or any(p.startswith(dotted + ".") for p in flagged):
                    return True  # a message is about it: always shown, so is its message
                if mode == SHOW_ALL:
                    return True
                if mode == SHOW_SET:
                    return get_path(data, path) is not None
                return rules.applies(path, spec)

            form.filter_rows(visible)

    def locate(self, path: str) -> QWidget | None:
        """Bring the setting at `path` into view and give it the focus; the widget, or None when not shown."""
        if path in ("launcher", "num_processes", "description"):
            own: QWidget = {"launcher": self.launcher, "num_processes": self.processes,
                            "description": self.description}[path]
            own.setFocus(Qt.FocusReason.OtherFocusReason)
            return own
        parts = parse_path(path)
        if not parts or parts[0] not in self.forms:
            return None
        section: Kind = "accelerate" if parts[0] == "accelerate" else "deepspeed"
        tab = self.section_tabs[section]
        self.tabs.setCurrentWidget(tab)
        widget = self.forms[section].locate(parts[1:])
        if widget is None:
            return None
        if not widget.isVisibleTo(tab.scroller.widget() or tab) and self.search.text():
            self.search.clear()  # the search hid it
        tab.scroller.ensureWidgetVisible(widget, 40, 80)
        widget.setFocus(Qt.FocusReason.OtherFocusReason)
        return widget


def _untouched_accelerate(section: dict | None, deepspeed: bool | None = None) -> bool:
    """`section` is the accelerate template a new preset or Add makes, unchanged (`deepspeed`: only the template
    with (True) or without (False) DeepSpeed; None: either)."""
    if not section:
        return False
    kinds = (False, True) if deepspeed is None else (deepspeed,)
    return any(section == blank_accelerate(kind) for kind in kinds)
