"""Drive Hermes's own tool dispatcher, without a model, against a reference backend and its fake.

Run with the Python of a venv that holds a real Hermes tree and the kit (``nox -s hermes_e2e``):

    python tests/e2e/hermes_tools.py BACKEND

It configures a private Hermes home the way the backend's README says (the plugin enabled, the
backend selected, the fake's variables in the profile's .env), starts the vendor fake, and sends
Hermes's tool calls through ``model_tools.handle_function_call``: a command, an exit status, a cd
kept across calls, a file written and read back by the file tools and read by the shell, a timeout,
and execute_code calling terminal().  Then it tears the environment down as Hermes does at exit and
checks that the work happened in the sandbox.  Exit 0 when every call gave what Hermes's user
would expect; each failure is one line naming the call.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# backend: (the plugin's entry point, the fake's vendor)
BACKENDS = {
    "upstash_box": ("upstash-box", "upstash"),
    "cloudflare_sandbox": ("cloudflare-sandbox", "cloudflare"),
    "deepinfra": ("deepinfra-sandbox", "deepinfra"),
}

CALLS = r"""
import json, sys
from hermes_cli.env_loader import load_hermes_dotenv
load_hermes_dotenv()
import model_tools
from hermes_cli.plugins import discover_plugins
discover_plugins()
marker = sys.argv[1]

def call(name, args):
    out = model_tools.handle_function_call(name, args, task_id="kit-e2e")
    try:
        return json.loads(out)
    except ValueError:
        return {"raw": out}

results = {
    "echo": call("terminal", {"command": f"echo {marker}"}),
    "exit": call("terminal", {"command": "exit 3"}),
    "cd": call("terminal", {"command": f"mkdir -p /tmp/{marker} && cd /tmp/{marker}"}),
    "pwd": call("terminal", {"command": "pwd"}),
    "write": call("write_file", {"path": f"/tmp/{marker}/note.txt", "content": f"{marker} by the file tool\n"}),
    "read": call("read_file", {"path": f"/tmp/{marker}/note.txt"}),
    "cat": call("terminal", {"command": "cat note.txt"}),
    "timeout": call("terminal", {"command": "sleep 20", "timeout": 2}),
    "code": call("execute_code", {"code": "from hermes_tools import terminal\n"
                                          f"print(terminal('echo code-{marker}')['output'])"}),
}
from tools.terminal_tool_lifecycle import cleanup_all_environments
cleanup_all_environments()
print("RESULTS " + json.dumps(results))
"""


def expectations(results: dict, marker: str) -> list[str]:
    """One line per call whose result a user of Hermes would not accept."""
    bad = []

    def want(name: str, ok: bool, what: str) -> None:
        if not ok:
            bad.append(f"{name}: {what}; got {json.dumps(results.get(name))[:400]}")

    echo = results["echo"]
    want("echo", echo.get("exit_code") == 0 and echo.get("output", "").strip() == marker, "exit 0 and the marker")
    want("exit", results["exit"].get("exit_code") == 3, "the command's own exit status 3")
    want("cd", results["cd"].get("exit_code") == 0, "exit 0")
    want("pwd", results["pwd"].get("output", "").strip() == f"/tmp/{marker}", "the directory the last call cd'd to")
    want("write", results["write"].get("bytes_written") == len(f"{marker} by the file tool\n"), "every byte written")
    want("read", f"{marker} by the file tool" in results["read"].get("content", ""), "the content written")
    want("cat", results["cat"].get("output", "").strip() == f"{marker} by the file tool", "the file, from the shell")
    want("timeout", results["timeout"].get("exit_code") == 124, "exit 124 after the 2 s timeout")
    code = results["code"]
    want("code", code.get("status") == "success" and f"code-{marker}" in code.get("output", ""), "terminal()'s output")
    return bad


def main(backend: str) -> int:
    plugin, vendor = BACKENDS[backend]
    root = Path(tempfile.mkdtemp(prefix=f"kit-e2e-{backend}-"))
    env = {**os.environ, "HERMES_HOME": str(root / "hermes"), "HOME": str(root / "home")}
    for name in ("HERMES_HOME", "HOME"):
        Path(env[name]).mkdir(parents=True)
    bin_dir = Path(sys.executable).parent
    fake = subprocess.Popen(
        [str(bin_dir / "hermes-backend-kit"), "fake", "serve", vendor, "--root", str(root / "fake")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    marker = f"kit-e2e-{secrets.token_hex(4)}"
    try:
        exports = {}
        for line in fake.stdout:
            if line.startswith("export "):
                name, _, value = line[len("export ") :].strip().partition("=")
                exports[name] = value.strip("'")
            if "is serving" in line:
                break
        else:
            print(f"{backend}: the {vendor} fake did not start", file=sys.stderr)
            return 1
        with open(Path(env["HERMES_HOME"]) / ".env", "a") as dotenv:
            dotenv.writelines(f"{name}={value}\n" for name, value in exports.items())
        for key, value in (("plugins.enabled", json.dumps([plugin])), ("terminal.backend", backend)):
            hermes = [str(bin_dir / "hermes"), "config", "set", key, value]
            subprocess.run(hermes, env=env, check=True, capture_output=True)
        done = subprocess.run(
            [sys.executable, "-c", CALLS, marker], env=env, capture_output=True, text=True, timeout=600, cwd=root
        )
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
        if line is None:
            print(f"{backend}: Hermes's dispatcher gave no results (exit {done.returncode}):\n{done.stderr[-3000:]}")
            return 1
        bad = expectations(json.loads(line[len("RESULTS ") :]), marker)
        if Path("/tmp", marker).exists():
            bad.append(f"the work landed on this machine (/tmp/{marker}), not in the sandbox")
        for problem in bad:
            print(f"{backend}: {problem}")
        print(f"{backend}: {'FAILED' if bad else 'passed'}: {9 - len(bad)} of 9 tool calls as a user expects")
        return 1 if bad else 0
    finally:
        os.killpg(fake.pid, signal.SIGTERM)
        fake.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
