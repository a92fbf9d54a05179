//! The notifiers against real sockets: a Slack webhook and an SMTP server, each a few lines of tokio in
//! the test, on the loopback interface.

mod email;
mod slack;

use tollgate_agent_core::{CallId, RunId};
use tollgate_agent_notify::message::{Notification, NotifyCall, NotifyEvent};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A notification for one run waiting on two calls, with signed-looking links.
fn notification() -> Notification {
    let call = |n: u32| NotifyCall {
        call_id: CallId::new(format!("call_{n}")),
        tool: "fs_write".into(),
        preview: format!("write notes/{n}.txt\n+hello"),
        approve_url: format!("https://tollgate.example.com/approve/t1.approve{n}.mac"),
        deny_url: format!("https://tollgate.example.com/approve/t1.deny{n}.mac"),
    };
    Notification {
        event: NotifyEvent::Requested,
        agent: "notes".into(),
        run_id: RunId::new("0193b0c6-1f2e-7a3b-8c4d-5e6f70819203"),
        input: "Write hello to two notes".into(),
        review_url: "https://tollgate.example.com/#/runs/0193b0c6-1f2e-7a3b-8c4d-5e6f70819203".into(),
        calls: vec![call(1), call(2)],
        waiting_since: 1_750_000_000_000,
    }
}

/// An address on the loopback interface that refuses connections: a port just bound and released.
async fn refusing_address() -> Result<std::net::SocketAddr, std::io::Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    listener.local_addr()
}
