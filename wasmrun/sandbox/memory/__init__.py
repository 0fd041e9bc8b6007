"""Memory kept ahead of runs: spare instances, a skill's pages (its imports done), a session's pages,
compiled skill bytecode, and the C heap given back."""
