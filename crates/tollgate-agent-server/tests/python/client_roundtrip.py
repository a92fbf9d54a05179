"""Generates a client from the committed openapi.json with openapi-python-client and drives a run with it.

Usage: client_roundtrip.py OPENAPI_JSON WORK_DIR BASE_URL TOKEN AGENT (run by openapi_tools.rs). AGENT's
first turn holds two calls (`call_1`, `call_2`); the client edits the first and approves the second, through
the generated decision classes, and the run completes. Then a second run is cancelled without a body.
"""

import subprocess
import sys
from pathlib import Path

document, work, base_url, token, agent = sys.argv[1:6]
work = Path(work)
config = work / "config.yaml"
config.write_text("package_name_override: tollgate_client\nproject_name_override: tollgate-client\n")
generator = Path(sys.executable).parent / "openapi-python-client"
subprocess.run(
    [str(generator), "generate", "--path", document, "--config", str(config), "--meta", "none",
     "--output-path", str(work / "tollgate_client")],
    check=True,
)
sys.path.insert(0, str(work))

from tollgate_client import AuthenticatedClient  # noqa: E402
from tollgate_client.api.runs import cancel_run, create_run, decide  # noqa: E402
from tollgate_client.models import (  # noqa: E402
    ApproveDecision, ApproveDecisionAction, CreateRun, DecideEach, EditDecision, EditDecisionAction,
    EditDecisionArguments, Run, RunStatus,
)

client = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)

run = create_run.sync(client=client, body=CreateRun(input_="roundtrip", agent=agent, wait=True))
assert isinstance(run, Run), run
assert run.status == RunStatus.WAITING_FOR_APPROVAL, run.status
digest = run.pending.turn_digest
arguments = EditDecisionArguments.from_dict({"text": "edited by the python client"})
body = DecideEach(
    turn_digest=digest,
    decisions=[
        EditDecision(call_id="call_1", action=EditDecisionAction.EDIT, arguments=arguments),
        ApproveDecision(call_id="call_2", action=ApproveDecisionAction.APPROVE),
    ],
    wait=True,
)
done = decide.sync(run.id, client=client, body=body)
assert isinstance(done, Run), done
assert done.status == RunStatus.COMPLETED, done.status

other = create_run.sync(client=client, body=CreateRun(input_="cancel me", agent=agent, wait=True))
# `None` is sent as a JSON `null` body, which the document declares and the server takes as empty.
cancelled = cancel_run.sync(other.id, client=client, body=None)
assert isinstance(cancelled, Run) and cancelled.status == RunStatus.CANCELLED, cancelled
print("generated client: start, edit + approve, completed; cancel with a null body")
