"""The command palette (ctrl+p): the app's actions, switching profile or TP size, jumping to a variant
(by id or knob) and diffing against any release or profile."""
from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

ACTIONS = [  # (text, action on the main screen, help)
    ("Diff: unsaved edits against the saved profile", "diff", "the same diff as r9kctl diff"),
    ("Save profile", "save", "write the edits, keeping comments and layout"),
    ("Save as new profile", "save_as", "a new profile that extends this one"),
    ("Launch (dry run first)", "launch", "show the exact command and environment, then confirm"),
    ("Reload from disk", "reload", "drop the edits and re-read the registry and profiles"),
    ("Reset variant to inherited value", "reset", "remove the profile's own key for the selected variant"),
    ("Problems: every error and warning", "problems", "choose one to jump to its variant"),
    ("Toggle detail pane", "toggle_detail", ""),
    ("Toggle light/dark theme", "app.toggle_r9k_theme", ""),
    ("Help: keys and columns", "app.help", ""),
]


class R9kCommands(Provider):
    def _commands(self):
        main = self.app.main_screen()
        if main is None:
            return
        s = main.s
        for text, action, help_ in ACTIONS:  # "app." actions go to the app (Textual's action namespaces)
            yield text, partial(main.run_action, action), help_
        for name in sorted(s.reg.profiles):
            if name != s.profile:
                yield f"Switch profile: {name}", partial(main.switch_profile, name), s.reg.profiles[name].description
        for tp in s.tp_options():
            yield f"Set TP size: {tp}", partial(main.switch_tp, tp), ""
        for side in sorted(s.reg.profiles) + list(reversed(s.reg.release_order())):
            if side != s.profile:
                yield f"Diff: {s.profile} against {side}", partial(main.action_diff, side, s.profile), ""
        for vid, v in s.reg.variants.items():
            yield f"Jump to variant: {vid} ({v.knob})", partial(main.jump_to, vid), v.summary

    async def discover(self) -> Hits:
        for text, cmd, help_ in self._commands():
            if text.startswith("Jump to") or " against " in text:  # many: found by searching
                continue
            yield DiscoveryHit(text, cmd, help=help_ or None)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, cmd, help_ in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), cmd, text=text, help=help_ or None)
