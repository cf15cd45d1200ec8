"""space-kernel: the code-interpreter daemon inside SPACE's code-interpreter template.

It serves E2B's code-interpreter wire protocol (POST /execute streaming NDJSON, /contexts,
/health) on TCP and a unix socket, and runs cells in stateful contexts: an ipykernel per
Python context (jupyter_client), a node process per JavaScript context (js_runner.js) and a
bash process per bash context. docs/code-interpreter.md describes the protocol.
"""

VERSION = "0.1.0"
