"""``r9kctl tui``: the control panel, a Textual app over the registry, resolver and validation.

app.py           the App (themes, keymap, command palette, the load or error screen)
session.py       the editing state: profile, TP size, unsaved edits, resolved set, report, budget; its journal
main_screen.py   the main screen, over variant_table.py and the other widgets (panels.py)
dialogs.py       the small screens; diff_screen.py, launch_screen.py and server_screen.py (over server.py) the others
web.py           ``--serve``: the panel in a browser
"""
