//! Live model text ([`Runtime::deltas`](crate::Runtime::deltas)): the deltas of the model calls this
//! process makes, as a streaming provider sends them, for viewers that want the text as it arrives (the
//! HTTP API's events stream with `deltas=true`, the CLI's `run` on a terminal).
//!
//! What it promises:
//! - live only: a delta is never stored, never chained, never replayed; the round's `model_response`
//!   event holds the whole turn;
//! - nothing the event log would not keep: deltas are sent only at privacy level `full`, and through
//!   the redactor. With secrets configured, a round's last characters (as many as the longest form of a
//!   secret the redactor finds, plus [`HOLD_MARGIN`]) are held back until more text arrives, so a secret
//!   split over deltas never goes out; when the call answers, what is still held goes out redacted, so
//!   the deltas of a round add up to its redacted text (the text of its `model_response` event);
//! - a broadcast: a receiver that falls behind loses deltas (and learns it), never events;
//! - this process's own calls: a viewer connected to another node gets the stored events only.

use std::sync::Arc;
use tokio::sync::broadcast;
use tollgate_agent_core::{ModelDelta, Redactor};

use crate::PrivacyLevel;

/// Characters held back beyond the longest secret when secrets are configured (room for a masked echo
/// of one, `sk-…3456`).
pub const HOLD_MARGIN: usize = 16;

/// Deltas kept for receivers that fall behind (all runs together).
const CAPACITY: usize = 4096;

/// One delta of one run's model call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveDelta {
    /// The run whose model call it is.
    pub run_id: String,
    /// The model call (the `round` of its `model_request` and `model_response` events).
    pub round: u32,
    /// What it says.
    pub text: LiveText,
}

/// What a [`LiveDelta`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveText {
    /// More of the round's text.
    Text(String),
    /// The call is being tried again: the round's text so far is void.
    Reset,
}

/// One run's deltas out of the runtime's broadcast ([`Runtime::deltas`](crate::Runtime::deltas)):
/// other runs' are skipped, and what a receiver that fell behind lost is gone (deltas are live only).
pub struct RunDeltas {
    receiver: broadcast::Receiver<Arc<LiveDelta>>,
    run_id: String,
}

impl RunDeltas {
    /// Run `run_id`'s deltas from `receiver` (subscribed whenever the caller needed it: before the run
    /// started, say, so that none of its first model call is missed).
    pub fn new(receiver: broadcast::Receiver<Arc<LiveDelta>>, run_id: impl Into<String>) -> Self {
        Self { receiver, run_id: run_id.into() }
    }

    /// The run's next delta; never answers once the runtime is gone.
    pub async fn next(&mut self) -> Arc<LiveDelta> {
        loop {
            match self.receiver.recv().await {
                Ok(delta) if delta.run_id == self.run_id => return delta,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
            }
        }
    }

    /// A delta of the run already received, if any.
    pub fn try_next(&mut self) -> Option<Arc<LiveDelta>> {
        loop {
            match self.receiver.try_recv() {
                Ok(delta) if delta.run_id == self.run_id => return Some(delta),
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => return None,
            }
        }
    }
}

/// The deltas of one runtime.
pub(crate) struct Deltas {
    sender: broadcast::Sender<Arc<LiveDelta>>,
    /// `None` when the log does not keep model text: nothing is sent.
    redactor: Option<Redactor>,
}

impl Deltas {
    pub(crate) fn new(privacy: PrivacyLevel, redactor: Redactor) -> Self {
        let (sender, _) = broadcast::channel(CAPACITY);
        Self { sender, redactor: (privacy == PrivacyLevel::Full).then_some(redactor) }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<LiveDelta>> {
        self.sender.subscribe()
    }

    /// Sends what `round_text` still holds of `run_id`'s round `round`, redacted: the model call answered,
    /// so no more text can complete a secret. Nothing when the round held nothing back.
    pub(crate) fn finish(&self, run_id: &str, round: u32, round_text: &mut RoundText) {
        let Some(redactor) = &self.redactor else { return };
        if round_text.round != round {
            return;
        }
        let Some(rest) = round_text.rest(redactor) else { return };
        if self.sender.receiver_count() > 0 {
            let _ =
                self.sender.send(Arc::new(LiveDelta { run_id: run_id.to_owned(), round, text: LiveText::Text(rest) }));
        }
    }

    /// Sends one delta of `run_id`'s round, through `round_text` (the run's state of its current round).
    pub(crate) fn send(&self, run_id: &str, round: u32, delta: ModelDelta<'_>, round_text: &mut RoundText) {
        let Some(redactor) = &self.redactor else { return };
        // Without secrets nothing is kept of a round: with nobody listening there is nothing to do. (With
        // secrets the round's text is kept even then, so a receiver that comes mid-round gets no part of
        // a secret whose start it missed.)
        if redactor.is_empty() && self.sender.receiver_count() == 0 {
            return;
        }
        if round_text.round != round {
            *round_text = RoundText { round, ..RoundText::default() };
        }
        let text = match delta {
            ModelDelta::Reset => {
                *round_text = RoundText { round, ..RoundText::default() };
                LiveText::Reset
            }
            ModelDelta::Text(text) => match round_text.clean(redactor, text) {
                Some(clean) => LiveText::Text(clean),
                None => return,
            },
        };
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Arc::new(LiveDelta { run_id: run_id.to_owned(), round, text }));
        }
    }
}

/// A run's text of its current round, as far as it has been sent (only kept with secrets configured).
#[derive(Debug, Default)]
pub(crate) struct RoundText {
    round: u32,
    /// The round's text as received.
    raw: String,
    /// How many bytes of the redacted text went out.
    sent: usize,
}

impl RoundText {
    /// What of `text` may go out now: all of it without secrets; else what the redacted text of the
    /// round gained beyond the held-back tail (`None` when that is nothing).
    fn clean(&mut self, redactor: &Redactor, text: &str) -> Option<String> {
        if redactor.is_empty() {
            return (!text.is_empty()).then(|| text.to_owned());
        }
        self.raw.push_str(text);
        let clean = redactor.redact(&self.raw);
        let hold = redactor.longest_secret() + HOLD_MARGIN;
        let keep = clean.chars().count().saturating_sub(hold);
        let end = clean.char_indices().nth(keep).map_or(clean.len(), |(at, _)| at);
        if end <= self.sent || !clean.is_char_boundary(self.sent) {
            return None;
        }
        let out = clean[self.sent..end].to_owned();
        self.sent = end;
        Some(out)
    }

    /// What the redacted text of the round holds beyond what went out (`None` when nothing was held).
    fn rest(&mut self, redactor: &Redactor) -> Option<String> {
        if redactor.is_empty() {
            return None;
        }
        let clean = redactor.redact(&self.raw);
        if clean.len() <= self.sent || !clean.is_char_boundary(self.sent) {
            return None;
        }
        let out = clean[self.sent..].to_owned();
        self.sent = clean.len();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(receiver: &mut broadcast::Receiver<Arc<LiveDelta>>) -> Vec<LiveText> {
        std::iter::from_fn(|| receiver.try_recv().ok()).map(|d| d.text.clone()).collect()
    }

    fn text(t: &str) -> LiveText {
        LiveText::Text(t.to_owned())
    }

    #[test]
    fn without_secrets_every_delta_goes_out_as_it_is() {
        let deltas = Deltas::new(PrivacyLevel::Full, Redactor::default());
        let mut receiver = deltas.subscribe();
        let mut round = RoundText::default();
        deltas.send("r", 1, ModelDelta::Text("hel"), &mut round);
        deltas.send("r", 1, ModelDelta::Text("lo"), &mut round);
        deltas.send("r", 1, ModelDelta::Reset, &mut round);
        deltas.send("r", 2, ModelDelta::Text("again"), &mut round);
        assert_eq!(received(&mut receiver), [text("hel"), text("lo"), LiveText::Reset, text("again")]);
    }

    #[test]
    fn a_log_that_keeps_no_model_text_sends_no_delta() {
        for level in [PrivacyLevel::Redacted, PrivacyLevel::Metadata] {
            let deltas = Deltas::new(level, Redactor::default());
            let mut receiver = deltas.subscribe();
            deltas.send("r", 1, ModelDelta::Text("hello"), &mut RoundText::default());
            assert!(received(&mut receiver).is_empty(), "{level:?}");
        }
    }

    /// A secret split over deltas never goes out, not even in part: the tail is held back until the
    /// secret is whole and redacted.
    #[test]
    fn a_secret_split_over_deltas_never_goes_out() {
        let secret = "sk-live-0123456789abcdef";
        let deltas = Deltas::new(PrivacyLevel::Full, Redactor::new([secret]));
        let mut receiver = deltas.subscribe();
        let mut round = RoundText::default();
        let said = format!(
            "{}the key is {secret} and that is all, said the model at length today{}",
            "x".repeat(50),
            " and more".repeat(12)
        );
        let chars: Vec<char> = said.chars().collect();
        for piece in chars.chunks(3) {
            deltas.send("r", 1, ModelDelta::Text(&piece.iter().collect::<String>()), &mut round);
        }
        let out: String = received(&mut receiver)
            .into_iter()
            .map(|t| match t {
                LiveText::Text(t) => t,
                LiveText::Reset => panic!("no reset was sent"),
            })
            .collect();
        for n in 6..=secret.len() {
            for start in 0..=secret.len() - n {
                assert!(!out.contains(&secret[start..start + n]), "{out:?} holds part of the secret");
            }
        }
        assert!(out.starts_with(&format!("{}the key is [redacted] and", "x".repeat(50))), "{out:?}");
        // The tail (the longest form of a secret + margin) is held back while the call goes on...
        let hold = Redactor::new([secret]).longest_secret() + HOLD_MARGIN;
        let whole = said.replace(secret, "[redacted]");
        assert_eq!(out, whole[..whole.len() - hold]);
        // ... and goes out when it answers: the round's deltas add up to its redacted text.
        deltas.finish("r", 1, &mut round);
        let rest: String = received(&mut receiver)
            .into_iter()
            .map(|t| match t {
                LiveText::Text(t) => t,
                LiveText::Reset => panic!("no reset was sent"),
            })
            .collect();
        assert_eq!(format!("{out}{rest}"), whole);
        deltas.finish("r", 1, &mut round);
        assert!(received(&mut receiver).is_empty(), "nothing is sent twice");
    }

    /// A round whose secret is the last thing the model said: the held tail goes out redacted at the end,
    /// never the secret.
    #[test]
    fn a_round_ending_in_a_secret_ends_with_it_redacted() {
        let secret = "sk-proj-0123456789abcdefghijklmnopqrstuv";
        let deltas = Deltas::new(PrivacyLevel::Full, Redactor::new([secret]));
        let mut receiver = deltas.subscribe();
        let mut round = RoundText::default();
        for piece in ["ok, your key: ", &secret[..10], &secret[10..]] {
            deltas.send("r", 3, ModelDelta::Text(piece), &mut round);
        }
        deltas.finish("r", 2, &mut round);
        assert!(received(&mut receiver).is_empty(), "another round's end sends nothing of this one");
        deltas.finish("r", 3, &mut round);
        let out: Vec<LiveText> = received(&mut receiver);
        assert_eq!(out, [text("ok, your key: [redacted]")]);
    }
}
