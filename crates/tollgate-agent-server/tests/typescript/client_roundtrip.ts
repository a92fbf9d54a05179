// Drives a run through a client made by openapi-typescript (the types, `schema.d.ts`, generated from the
// committed openapi.json) and openapi-fetch, as a TypeScript user of the API would.
//
// Usage: node client_roundtrip.js BASE_URL TOKEN AGENT (run by openapi_tools.rs, after `tsc --noEmit`
// with `strict` and a compile). AGENT's first turn holds two `write` calls (`call_1`, `call_2`): the
// client starts a run with metadata, edits the first call's arguments and approves the second in one
// body typed as the document's own `DecideRequest`, and sees the run complete; then it reads the
// run's events, and gets problems (409 on deciding again, 415 on a body not declared as JSON) as the
// document's `Problem`.

import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type DecideRequest = components["schemas"]["DecideRequest"];
type Problem = components["schemas"]["Problem"];
type Run = components["schemas"]["Run"];

function check(condition: boolean, what: string, value?: unknown): asserts condition {
  if (!condition) {
    throw new Error(`${what}${value === undefined ? "" : `: ${JSON.stringify(value)}`}`);
  }
}

function problemOf(error: Problem | undefined, status: number, slug: string): void {
  check(error !== undefined, `a ${status} problem`);
  check(error.status === status, `status ${status}`, error);
  check(error.type === `https://tollgate.dev/problems/${slug}`, `type ${slug}`, error);
  check(error.detail.length > 0, "a detail", error);
}

const [baseUrl, token, agent] = process.argv.slice(2);
check(baseUrl !== undefined && token !== undefined && agent !== undefined, "usage: BASE_URL TOKEN AGENT");

const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });

// Start: `metadata` is a free-form object, typed as a map of anything.
const metadata: Record<string, unknown> = { customer: "acme", seats: 3, tags: ["typescript"] };
const started = await client.POST("/v1/runs", { body: { input: "roundtrip", agent, wait: true, metadata } });
check(started.response.status === 201, "201 on start", started.error);
const run: Run = started.data!;
check(run.status === "waiting_for_approval", "the run waits for approval", run.status);
check(run.metadata["customer"] === "acme" && run.metadata["seats"] === 3, "metadata as given", run.metadata);
const pending = run.pending;
check(pending !== null, "a held turn", run);
const first = pending.calls.find((call) => call.call_id === "call_1");
check(first !== undefined && typeof first.arguments["text"] === "string", "call_1 with its arguments", pending);

// Edit + approve, in one body typed as the document's `DecideRequest`.
const decisions: DecideRequest = {
  turn_digest: pending.turn_digest,
  decisions: [
    { call_id: "call_1", action: "edit", arguments: { text: "edited by the typescript client" } },
    { call_id: "call_2", action: "approve" },
  ],
  wait: true,
};
const path = { params: { path: { id: run.id } } };
const decided = await client.POST("/v1/runs/{id}/decisions", { ...path, body: decisions });
check(decided.response.status === 200, "200 on the decisions", decided.error);
check(decided.data!.status === "completed", "the run completed", decided.data);
const edited = decided.data!.pending;
check(edited === null, "nothing held once completed", edited);

// The log, as JSON (the operation's other form is an SSE stream, typed as a string): each event's
// `data` is a free-form object.
const events = await client.GET("/v1/runs/{id}/events", path);
const page = events.data;
check(page !== undefined && typeof page !== "string", "the events as JSON", events.error);
const kinds = page.events.map((event) => event.kind);
check(kinds.at(-1) === "run_completed", "the log ends with run_completed", kinds);
const decision = page.events.find((event) => event.kind === "decision" && event.data["call_id"] === "call_1");
check(decision !== undefined, "the edit on the log", kinds);

// Problems come back as the document's `Problem`, by status.
const again = await client.POST("/v1/runs/{id}/decisions", { ...path, body: decisions });
problemOf(again.error, 409, "conflict");
check(again.response.headers.get("content-type") === "application/problem+json", "problem+json", again.response);
const notJson = await client.POST("/v1/runs/{id}/decisions", {
  ...path,
  body: decisions,
  headers: { "Content-Type": "text/plain" },
  bodySerializer: (body) => JSON.stringify(body),
});
problemOf(notJson.error, 415, "unsupported-media-type");

console.log("typescript client: start, edit + approve, completed; events; 409 and 415 as problems");
