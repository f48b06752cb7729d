"""``r9kctl tui``: the control panel, a Textual app over the registry, resolver and validation.

app.py           the App (themes, keymap, command palette, the load or error screen)
session.py       the editing state: profile, TP size, unsaved edits, resolved set, report, budget
main_screen.py   the main screen; one widget or screen per module besides
"""
