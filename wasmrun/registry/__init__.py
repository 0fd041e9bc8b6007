"""The skill registry: skills as folders of skill.toml + SKILL.md + code/ + resources/."""
