//! A tiny MCP server for tollgate-agent-mcp's tests, written by hand over stdio (newline-delimited JSON-RPC,
//! `serde_json` only) so the tests exercise rmcp's client against an independent implementation.
//!
//! Tools: `read_thing` (readOnlyHint), `delete_thing` (destructiveHint), `purge_things` (both hints at
//! once), `crash` (exits mid-call), `slow`
//! (answers after `ms` milliseconds, on its own thread), `mixed` (text, image and resource blocks),
//! `picture` (readOnlyHint: `count` image blocks after a text line, each `bytes` long, claimed as
//! `mime` (default `image/png`), starting with the signature of `format` (`png`, `jpeg`, `gif`, `webp`,
//! `none`; default the one `mime` names); `data` sends that text as each image's data instead),
//! `odd name.v2` (no description, a non-object schema), a tool whose `SERVER__TOOL` name is too long, and
//! `get_env` (readOnlyHint: the value of the environment variable `name`, like the reference
//! `server-everything`'s tool of the same kind), and `cancelled_requests` (readOnlyHint: the
//! `notifications/cancelled` received so far, each with the tool of the request it names; with
//! `at_least: N` it answers once N have arrived, or after 5 seconds with what it has). A `slow` call
//! cancelled before its time is never answered, as the spec asks.
//!
//! Flags: `--refuse` (or env `TOLLGATE_TEST_SERVER_REFUSE`) exits 1 at once; `--refuse-if-exists PATH`
//! does so only while PATH exists; `--mute` reads requests and never answers; `--page-size N` splits
//! `tools/list` into pages of N tools linked by `nextCursor`.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The long tool name: `test__` + this is 70 characters.
const LONG_TOOL: &str = "a_tool_name_long_enough_that_the_full_name_passes_sixty_four_chars";

/// How long `cancelled_requests` with `at_least` waits for cancellations before answering anyway.
const CANCELLED_WAIT: Duration = Duration::from_secs(5);

struct Options {
    mute: bool,
    page_size: Option<usize>,
}

type Out = Arc<Mutex<std::io::Stdout>>;

/// What the server remembers of requests: the tool of every `tools/call` by request id, and every
/// `notifications/cancelled`, in arrival order.
#[derive(Default)]
struct Requests {
    tools: HashMap<String, String>,
    cancelled: Vec<Value>,
}

#[derive(Default)]
struct Journal {
    requests: Mutex<Requests>,
    changed: Condvar,
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Requests> {
        self.requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record_call(&self, id: &Value, tool: &str) {
        self.lock().tools.insert(id.to_string(), tool.to_owned());
    }

    fn record_cancelled(&self, params: &Value) {
        let id = params.get("requestId").cloned().unwrap_or(Value::Null);
        let mut requests = self.lock();
        let tool = requests.tools.get(&id.to_string()).cloned();
        let reason = params.get("reason").cloned().unwrap_or(Value::Null);
        requests.cancelled.push(json!({"requestId": id, "tool": tool, "reason": reason}));
        self.changed.notify_all();
    }

    fn is_cancelled(&self, id: &Value) -> bool {
        self.lock().cancelled.iter().any(|c| c.get("requestId") == Some(id))
    }

    /// The cancellations received, once there are at least `at_least` or [`CANCELLED_WAIT`] passed.
    fn cancelled(&self, at_least: usize) -> Vec<Value> {
        let deadline = Instant::now() + CANCELLED_WAIT;
        let mut requests = self.lock();
        while requests.cancelled.len() < at_least {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            requests = self.changed.wait_timeout(requests, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        requests.cancelled.clone()
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut options = Options { mute: false, page_size: None };
    let mut refuse = std::env::var_os("TOLLGATE_TEST_SERVER_REFUSE").is_some();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--refuse" => refuse = true,
            "--mute" => options.mute = true,
            "--refuse-if-exists" => {
                i += 1;
                if args.get(i).is_some_and(|path| std::path::Path::new(path).exists()) {
                    refuse = true;
                }
            }
            "--page-size" => {
                i += 1;
                options.page_size = args.get(i).and_then(|n| n.parse().ok());
            }
            other => eprintln!("ignoring unknown argument {other}"),
        }
        i += 1;
    }
    if refuse {
        eprintln!("refusing to start, as asked");
        std::process::exit(1);
    }
    eprintln!("test server {} ready", std::process::id());

    let out = Arc::new(Mutex::new(std::io::stdout()));
    let journal = Arc::new(Journal::default());
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() || options.mute {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            send(&out, &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}}));
            continue;
        };
        let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        // A message without an id is a notification (initialized, cancelled): nothing to answer.
        let Some(id) = message.get("id").cloned() else {
            if method == "notifications/cancelled" {
                journal.record_cancelled(&params);
            }
            continue;
        };
        let reply = match method {
            "initialize" => Ok(initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(list_tools(&params, options.page_size)),
            "tools/call" => call_tool(&params, &id, &out, &journal),
            _ => Err((-32601, format!("method not found: {method}"))),
        };
        match reply {
            Ok(Value::Null) => {} // answered later, from another thread
            Ok(result) => send(&out, &json!({"jsonrpc": "2.0", "id": id, "result": result})),
            Err((code, message)) => {
                send(&out, &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
            }
        }
    }
    Ok(())
}

fn send(out: &Mutex<std::io::Stdout>, message: &Value) {
    let mut out = out.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}

fn initialize(params: &Value) -> Value {
    const SUPPORTED: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version = if SUPPORTED.contains(&asked) { asked } else { "2025-11-25" };
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "tollgate-agent-mcp-test-server", "version": "0.1.0"}
    })
}

fn tools() -> Vec<Value> {
    let id_schema = json!({
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "required": ["id"],
        "additionalProperties": false
    });
    vec![
        json!({
            "name": "read_thing",
            "description": "Reads a thing by id.",
            "inputSchema": id_schema,
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "delete_thing",
            "description": "Deletes a thing by id.",
            "inputSchema": id_schema,
            "annotations": {"readOnlyHint": false, "destructiveHint": true}
        }),
        // Contradictory hints: read-only and destructive at once.
        json!({
            "name": "purge_things",
            "description": "Claims to only read, and to destroy.",
            "inputSchema": id_schema,
            "annotations": {"readOnlyHint": true, "destructiveHint": true}
        }),
        json!({
            "name": "crash",
            "description": "Exits the server in the middle of the call.",
            "inputSchema": {"type": "object"}
        }),
        json!({
            "name": "slow",
            "description": "Answers after `ms` milliseconds.",
            "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "mixed",
            "description": "Returns text, an image and an embedded resource.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "picture",
            "description": "Returns `count` images of `bytes` bytes each, claimed as `mime`, signed as `format`.",
            "inputSchema": {"type": "object", "properties": {
                "count": {"type": "integer"},
                "bytes": {"type": "integer"},
                "mime": {"type": "string"},
                "format": {"type": "string"},
                "data": {"type": "string"}
            }},
            "annotations": {"readOnlyHint": true}
        }),
        json!({"name": "odd name.v2", "inputSchema": {"type": "string"}}),
        json!({"name": LONG_TOOL, "description": "Has a long name.", "inputSchema": {"type": "object"}}),
        json!({
            "name": "get_env",
            "description": "The value of an environment variable of the server.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "cancelled_requests",
            "description": "The cancellations received so far; waits (bounded) for `at_least` of them.",
            "inputSchema": {"type": "object", "properties": {"at_least": {"type": "integer"}}},
            "annotations": {"readOnlyHint": true}
        }),
    ]
}

fn list_tools(params: &Value, page_size: Option<usize>) -> Value {
    let all = tools();
    let Some(size) = page_size.filter(|size| *size > 0) else { return json!({"tools": all}) };
    let start: usize = params.get("cursor").and_then(Value::as_str).and_then(|c| c.parse().ok()).unwrap_or(0);
    let end = (start + size).min(all.len());
    let page: Vec<Value> = all.get(start..end).map(<[Value]>::to_vec).unwrap_or_default();
    if end < all.len() { json!({"tools": page, "nextCursor": end.to_string()}) } else { json!({"tools": page}) }
}

fn text(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

/// The answer of `picture` (see the module's header).
fn picture(args: &Value) -> Value {
    let count = args.get("count").and_then(Value::as_u64).unwrap_or(1);
    let bytes = args.get("bytes").and_then(Value::as_u64).and_then(|b| usize::try_from(b).ok()).unwrap_or(64);
    let mime = args.get("mime").and_then(Value::as_str).unwrap_or("image/png");
    let format = args.get("format").and_then(Value::as_str).unwrap_or_else(|| mime.trim_start_matches("image/"));
    let signature: &[u8] = match format {
        "png" => b"\x89PNG\r\n\x1a\n",
        "jpeg" => b"\xff\xd8\xff\xe0",
        "gif" => b"GIF89a",
        "webp" => b"RIFF\0\0\0\0WEBPVP8 ",
        _ => b"",
    };
    let data = match args.get("data").and_then(Value::as_str) {
        Some(data) => data.to_owned(),
        None => {
            let mut image = signature.to_vec();
            image.resize(bytes.max(signature.len()), 0x5a);
            base64(&image)
        }
    };
    let mut content = vec![json!({"type": "text", "text": format!("{count} picture(s)")})];
    content.extend((0..count).map(|_| json!({"type": "image", "data": data, "mimeType": mime})));
    json!({"content": content})
}

/// Standard padded base64.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let group = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                text.push(char::from(ALPHABET[(group >> (18 - 6 * i)) as usize & 63]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

fn call_tool(params: &Value, id: &Value, out: &Out, journal: &Arc<Journal>) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
    journal.record_call(id, name);
    let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
    let thing = args.get("id").and_then(Value::as_str).unwrap_or("?");
    match name {
        "read_thing" => Ok(text(format!("thing {thing} (pid {})", std::process::id()))),
        "delete_thing" if thing == "missing" => {
            Ok(json!({"content": [{"type": "text", "text": "no thing missing"}], "isError": true}))
        }
        "delete_thing" => Ok(text(format!("deleted thing {thing}"))),
        "purge_things" => Ok(text(format!("purged things from {thing}"))),
        "crash" => {
            eprintln!("crashing on purpose");
            std::process::exit(3);
        }
        "slow" => {
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            let (out, id, journal) = (out.clone(), id.clone(), journal.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(ms));
                if !journal.is_cancelled(&id) {
                    send(&out, &json!({"jsonrpc": "2.0", "id": id, "result": text(format!("slept {ms}ms"))}));
                }
            });
            Ok(Value::Null)
        }
        "mixed" => Ok(json!({"content": [
            {"type": "text", "text": "first"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "thing://1", "mimeType": "text/plain", "text": "embedded"}},
            {"type": "text", "text": "last"}
        ]})),
        "picture" => Ok(picture(&args)),
        "odd name.v2" => Ok(text(format!("odd called with {args}"))),
        LONG_TOOL => Ok(text("long")),
        "get_env" => {
            let variable = args.get("name").and_then(Value::as_str).unwrap_or_default();
            Ok(text(std::env::var(variable).unwrap_or_else(|_| "(unset)".to_owned())))
        }
        "cancelled_requests" => {
            let at_least = args.get("at_least").and_then(Value::as_u64).unwrap_or(0);
            let at_least = usize::try_from(at_least).unwrap_or(usize::MAX);
            let (out, id, journal) = (out.clone(), id.clone(), journal.clone());
            // On its own thread: the cancellations it waits for arrive on the main one.
            std::thread::spawn(move || {
                let cancelled = Value::Array(journal.cancelled(at_least));
                send(&out, &json!({"jsonrpc": "2.0", "id": id, "result": text(cancelled.to_string())}));
            });
            Ok(Value::Null)
        }
        _ => Err((-32602, format!("unknown tool: {name}"))),
    }
}
