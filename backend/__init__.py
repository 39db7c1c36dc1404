"""Everything that is not drawing: configs, presets, launching, runs, monitoring, estimates. Never imports Qt."""
