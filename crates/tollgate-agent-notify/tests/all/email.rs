use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate_agent_notify::transport::{EmailNotifier, EmailSettings, SetupError, Transport};

use crate::{TestResult, notification, refusing_address};

/// A server task, giving back what it saw.
type Server<T> = JoinHandle<Result<T, std::io::Error>>;

/// What the SMTP server was told: the commands, and the message after DATA.
#[derive(Default)]
struct Conversation {
    commands: Vec<String>,
    data: String,
}

/// An SMTP server for one conversation: it accepts everything but answers `RCPT` with `rcpt_reply`.
async fn smtp_server(rcpt_reply: &'static str) -> Result<(u16, Server<Conversation>), std::io::Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await?;
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::new(reader);
        let mut seen = Conversation::default();
        writer.write_all(b"220 test.invalid ESMTP\r\n").await?;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).await? == 0 {
                break;
            }
            let command = line.trim_end().to_owned();
            let verb = command.split([' ', ':']).next().unwrap_or_default().to_ascii_uppercase();
            seen.commands.push(command);
            let reply: &str = match verb.as_str() {
                "EHLO" | "HELO" => "250-test.invalid\r\n250 8BITMIME\r\n",
                "MAIL" => "250 2.1.0 ok\r\n",
                "RCPT" => rcpt_reply,
                "DATA" => {
                    writer.write_all(b"354 go ahead\r\n").await?;
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).await? == 0 || line == ".\r\n" {
                            break;
                        }
                        seen.data.push_str(&line);
                    }
                    "250 2.0.0 queued\r\n"
                }
                "QUIT" => {
                    writer.write_all(b"221 bye\r\n").await?;
                    break;
                }
                _ => "250 ok\r\n",
            };
            writer.write_all(reply.as_bytes()).await?;
        }
        Ok(seen)
    });
    Ok((port, server))
}

fn settings(port: u16) -> EmailSettings {
    EmailSettings {
        host: "127.0.0.1".into(),
        port,
        starttls: false,
        credentials: None,
        from: "Tollgate <tollgate@example.com>".into(),
        to: vec!["ops@example.com".into(), "Oncall <oncall@example.com>".into()],
        timeout: Duration::from_secs(10),
    }
}

/// The message's text with folded header lines joined, and quoted-printable soft line breaks and `=3D`
/// undone, so the subject and the links read whole whatever the mail library folded or encoded.
fn unfolded(data: &str) -> String {
    data.replace("\r\n ", " ").replace("=\r\n", "").replace("=3D", "=")
}

#[tokio::test]
async fn a_mail_carries_both_parts_and_every_link() -> TestResult {
    let (port, server) = smtp_server("250 2.1.5 ok\r\n").await?;
    let email = Transport::Email(EmailNotifier::new(settings(port))?);
    email.send(&notification()).await?;
    // The transport keeps the connection for the next message: dropping it ends the conversation.
    drop(email);
    let seen = server.await??;
    assert!(seen.commands[0].starts_with("EHLO "), "{:?}", seen.commands);
    assert!(seen.commands.iter().any(|c| c.starts_with("MAIL FROM:<tollgate@example.com>")), "{:?}", seen.commands);
    assert!(seen.commands.iter().any(|c| c == "RCPT TO:<ops@example.com>"), "{:?}", seen.commands);
    assert!(seen.commands.iter().any(|c| c == "RCPT TO:<oncall@example.com>"), "{:?}", seen.commands);
    let data = unfolded(&seen.data);
    assert!(data.contains("Subject: [Tollgate] notes is waiting for approval (2 calls, run 0193b0c6"), "{data}");
    assert!(data.contains("From: Tollgate <tollgate@example.com>"), "{data}");
    assert!(data.contains("Content-Type: multipart/alternative;"), "{data}");
    assert!(data.contains("Content-Type: text/plain; charset=utf-8"), "{data}");
    assert!(data.contains("Content-Type: text/html; charset=utf-8"), "{data}");
    let (plain, html) = data.split_once("Content-Type: text/html").ok_or("no HTML part")?;
    for link in [
        "https://tollgate.example.com/approve/t1.approve1.mac",
        "https://tollgate.example.com/approve/t1.deny1.mac",
        "https://tollgate.example.com/approve/t1.approve2.mac",
        "https://tollgate.example.com/approve/t1.deny2.mac",
        "https://tollgate.example.com/#/runs/0193b0c6-1f2e-7a3b-8c4d-5e6f70819203",
    ] {
        assert!(plain.contains(link), "{link} in the text part: {plain}");
        assert!(html.contains(&format!("href=\"{link}\"")), "{link} in the HTML part: {html}");
    }
    Ok(())
}

#[tokio::test]
async fn a_temporary_refusal_may_pass_and_a_permanent_one_will_not() -> TestResult {
    for (reply, retryable) in [("451 4.3.0 try later\r\n", true), ("550 5.1.1 no such user\r\n", false)] {
        let (port, server) = smtp_server(reply).await?;
        let error = EmailNotifier::new(settings(port))?.send(&notification()).await.expect_err(reply);
        assert_eq!(error.retryable, retryable, "{reply}: {error}");
        assert!(error.to_string().starts_with("mail not sent: "), "{error}");
        let seen = server.await??;
        assert!(seen.data.is_empty(), "nothing is sent after a refused recipient");
    }
    Ok(())
}

#[tokio::test]
async fn a_refused_connection_may_pass() -> TestResult {
    let address = refusing_address().await?;
    let mut settings = settings(address.port());
    settings.credentials = Some(("tollgate".into(), "sm7p-pa55word".into()));
    let notifier = EmailNotifier::new(settings.clone())?;
    let error = notifier.send(&notification()).await.expect_err("nothing listens");
    assert!(error.retryable, "{error}");
    for shown in [error.to_string(), format!("{error:?}"), format!("{notifier:?}"), format!("{settings:?}")] {
        assert!(!shown.contains("pa55word"), "{shown}");
    }
    Ok(())
}

#[tokio::test]
async fn starttls_required_refuses_a_server_without_it() -> TestResult {
    let (port, server) = smtp_server("250 ok\r\n").await?;
    let error = EmailNotifier::new(EmailSettings { starttls: true, ..settings(port) })?
        .send(&notification())
        .await
        .expect_err("no STARTTLS offered");
    assert!(!error.retryable, "{error}");
    let seen = server.await??;
    assert!(!seen.commands.iter().any(|c| c.starts_with("MAIL")), "{:?}", seen.commands);
    Ok(())
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() -> TestResult {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    // Accepts, never greets, and waits until the client hangs up.
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await?;
        let mut rest = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut rest).await;
        Ok::<_, std::io::Error>(())
    });
    let notifier = EmailNotifier::new(EmailSettings { timeout: Duration::from_millis(300), ..settings(port) })?;
    let error = notifier.send(&notification()).await.expect_err("no greeting");
    assert!(error.retryable, "{error}");
    assert_eq!(error.to_string(), "the SMTP server did not finish within 300ms");
    server.await??;
    Ok(())
}

#[test]
fn mailboxes_must_parse_and_someone_must_receive() {
    let bad_from = EmailNotifier::new(EmailSettings { from: "not a mailbox".into(), ..settings(25) });
    assert!(matches!(bad_from, Err(SetupError::Mailbox { field: "from", .. })), "{bad_from:?}");
    let bad_to = EmailNotifier::new(EmailSettings { to: vec!["ops@example.com".into(), "@@".into()], ..settings(25) });
    assert!(matches!(&bad_to, Err(SetupError::Mailbox { field: "to", value, .. }) if value == "@@"), "{bad_to:?}");
    let nobody = EmailNotifier::new(EmailSettings { to: Vec::new(), ..settings(25) });
    assert!(matches!(nobody, Err(SetupError::NoRecipients)), "{nobody:?}");
}
