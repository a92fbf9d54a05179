//! Live model text ([`Runtime::deltas`](crate::Runtime::deltas)): the deltas of the model calls this
//! process makes, as a streaming provider sends them, for viewers that want the text as it arrives (the
//! HTTP API's events stream with `deltas=true`, the CLI's `run` on a terminal).
//!
//! What it promises:
//! - live only: a delta is never stored, never chained, never replayed; the round's `model_response`
//!   event holds the whole turn;
//! - nothing the event log would not keep: deltas are sent only at privacy level `full`, and through
//!   the redactor. With secrets configured, a round's text goes through a [`RedactedStream`]: only the
//!   tail that could still turn out to be a secret (the start of one, in any form the redactor finds,
//!   or of a masked echo of one: [`Redactor::open_tail`]) is held back until more text settles it, so a
//!   secret split over deltas never goes out, in whole or in part; when the call answers, what is still
//!   held goes out redacted. The deltas of a round add up to its redacted text (the text of its
//!   `model_response` event); a reset (the call is tried again) voids what went before it;
//! - a broadcast: a receiver that falls behind loses deltas (and learns it), never events;
//! - this process's own calls: a viewer connected to another node gets the stored events only.

use std::sync::Arc;
use tokio::sync::broadcast;
use tollgate_agent_core::RunId;
use tollgate_agent_core::{ModelDelta, RedactedStream, Redactor};

use crate::PrivacyLevel;

/// Deltas kept for receivers that fall behind (all runs together).
const CAPACITY: usize = 4096;

/// One delta of one run's model call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LiveDelta {
    /// The run whose model call it is.
    pub run_id: RunId,
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
    run_id: RunId,
}

impl RunDeltas {
    /// Run `run_id`'s deltas from `receiver` (subscribed whenever the caller needed it: before the run
    /// started, say, so that none of its first model call is missed).
    pub fn new(receiver: broadcast::Receiver<Arc<LiveDelta>>, run_id: impl Into<RunId>) -> Self {
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
    pub(crate) fn finish(&self, run_id: &RunId, round: u32, round_text: &mut RoundText) {
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
    pub(crate) fn send(&self, run_id: &RunId, round: u32, delta: ModelDelta<'_>, round_text: &mut RoundText) {
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
    /// The round's text through the redactor: what is held back, and what went out.
    stream: RedactedStream,
}

impl RoundText {
    /// What of `text` may go out now: all of it without secrets; else what the redacted text of the
    /// round gained beyond its open tail (`None` when that is nothing).
    fn clean(&mut self, redactor: &Redactor, text: &str) -> Option<String> {
        let out = self.stream.push(redactor, text);
        (!out.is_empty()).then_some(out)
    }

    /// What the redacted text of the round holds beyond what went out (`None` when nothing was held).
    fn rest(&mut self, redactor: &Redactor) -> Option<String> {
        let out = self.stream.finish(redactor);
        (!out.is_empty()).then_some(out)
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
        let run = RunId::from("r");
        let mut round = RoundText::default();
        deltas.send(&run, 1, ModelDelta::Text("hel"), &mut round);
        deltas.send(&run, 1, ModelDelta::Text("lo"), &mut round);
        deltas.send(&run, 1, ModelDelta::Reset, &mut round);
        deltas.send(&run, 2, ModelDelta::Text("again"), &mut round);
        assert_eq!(received(&mut receiver), [text("hel"), text("lo"), LiveText::Reset, text("again")]);
    }

    #[test]
    fn a_log_that_keeps_no_model_text_sends_no_delta() {
        for level in [PrivacyLevel::Redacted, PrivacyLevel::Metadata] {
            let deltas = Deltas::new(level, Redactor::default());
            let mut receiver = deltas.subscribe();
            let run = RunId::from("r");
            deltas.send(&run, 1, ModelDelta::Text("hello"), &mut RoundText::default());
            assert!(received(&mut receiver).is_empty(), "{level:?}");
        }
    }

    fn joined(texts: Vec<LiveText>) -> String {
        texts
            .into_iter()
            .map(|t| match t {
                LiveText::Text(t) => t,
                LiveText::Reset => panic!("no reset was sent"),
            })
            .collect()
    }

    /// A secret split over deltas never goes out, not even in part: only the tail that could still be
    /// its start is held back, until the secret is whole and redacted; the rest goes out at once.
    #[test]
    fn a_secret_split_over_deltas_never_goes_out() {
        let secret = "sk-live-0123456789abcdef";
        let redactor = Redactor::new([secret]);
        let deltas = Deltas::new(PrivacyLevel::Full, redactor.clone());
        let mut receiver = deltas.subscribe();
        let run = RunId::from("r");
        let mut round = RoundText::default();
        let said = format!(
            "{}the key is {secret} and that is all, said the model at length today{}",
            "x".repeat(50),
            " and more".repeat(12)
        );
        let chars: Vec<char> = said.chars().collect();
        for piece in chars.chunks(3) {
            deltas.send(&run, 1, ModelDelta::Text(&piece.iter().collect::<String>()), &mut round);
        }
        let out = joined(received(&mut receiver));
        for n in 6..=secret.len() {
            for start in 0..=secret.len() - n {
                assert!(!out.contains(&secret[start..start + n]), "{out:?} holds part of the secret");
            }
        }
        // Only the open tail (here the last `e`, which could start a run of the key) is held back while
        // the call goes on...
        let whole = said.replace(secret, "[redacted]");
        assert_eq!(redactor.open_tail(&said), 1);
        assert_eq!(out, whole[..whole.len() - 1]);
        // ... and goes out when it answers: the round's deltas add up to its redacted text.
        deltas.finish(&run, 1, &mut round);
        assert_eq!(format!("{out}{}", joined(received(&mut receiver))), whole);
        deltas.finish(&run, 1, &mut round);
        assert!(received(&mut receiver).is_empty(), "nothing is sent twice");
    }

    /// A round whose secret is the last thing the model said: what comes before it goes out at once, the
    /// secret redacted once it is whole; the start of a secret still open when the call answers goes out
    /// redacted then.
    #[test]
    fn a_round_ending_in_a_secret_ends_with_it_redacted() {
        let secret = "sk-proj-0123456789abcdefghijklmnopqrstuv";
        let deltas = Deltas::new(PrivacyLevel::Full, Redactor::new([secret]));
        let mut receiver = deltas.subscribe();
        let run = RunId::from("r");
        let mut round = RoundText::default();
        for piece in ["ok, your key: ", &secret[..10], &secret[10..30]] {
            deltas.send(&run, 3, ModelDelta::Text(piece), &mut round);
        }
        assert_eq!(received(&mut receiver), [text("ok, your key: ")]);
        deltas.finish(&run, 2, &mut round);
        assert!(received(&mut receiver).is_empty(), "another round's end sends nothing of this one");
        deltas.finish(&run, 3, &mut round);
        assert_eq!(received(&mut receiver), [text("[redacted]")], "30 of 40 characters: a long prefix");
        for piece in ["and: ", &secret[..10], &secret[10..]] {
            deltas.send(&run, 4, ModelDelta::Text(piece), &mut round);
        }
        assert_eq!(received(&mut receiver), [text("and: "), text("[redacted]")]);
        deltas.finish(&run, 4, &mut round);
        assert!(received(&mut receiver).is_empty(), "nothing was held");
    }

    /// With a real provider key configured (164 characters), a round cut into deltas at random points —
    /// and tried again after a reset — streams as it arrives: its deltas after the reset add up to the
    /// redacted text, none ever holds 8 characters of the key or of its hex form, and all but a few
    /// characters go out before the call answers.
    #[test]
    fn with_a_164_character_key_the_deltas_add_up_to_the_redacted_text() {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let key: String = format!(
            "sk-proj-{}",
            (0..156).map(|i| char::from(ALPHABET[(i * 29 + 5) % ALPHABET.len()])).collect::<String>()
        );
        assert_eq!(key.len(), 164);
        let redactor = Redactor::new([key.as_str()]);
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        let said = format!(
            "I will write a short note. The key you gave me is {key}, in hex {hex}; I will not repeat it. \
             Saving the note now…"
        );
        let whole = redactor.redact(&said).into_owned();
        assert_eq!(
            whole,
            "I will write a short note. The key you gave me is [redacted], in hex [redacted]; I will not \
             repeat it. Saving the note now…"
        );
        let forms = [key.to_ascii_lowercase(), hex];
        let chars: Vec<char> = said.chars().collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut random = move |below: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % u64::try_from(below).unwrap_or(1)).unwrap_or(0)
        };
        for _ in 0..100 {
            let deltas = Deltas::new(PrivacyLevel::Full, redactor.clone());
            let mut receiver = deltas.subscribe();
            let run = RunId::from("r");
            let mut round = RoundText::default();
            // A first attempt cut somewhere, then the whole answer again.
            let cut = random(chars.len());
            for attempt in [&chars[..cut], &chars[..]] {
                let mut at = 0;
                while at < attempt.len() {
                    let end = (at + 1 + random(12)).min(attempt.len());
                    let piece: String = attempt[at..end].iter().collect();
                    deltas.send(&run, 1, ModelDelta::Text(&piece), &mut round);
                    at = end;
                }
                if attempt.len() < chars.len() {
                    deltas.send(&run, 1, ModelDelta::Reset, &mut round);
                }
            }
            let mut got = received(&mut receiver);
            let after_reset = got.iter().rposition(|t| *t == LiveText::Reset).map_or(0, |at| at + 1);
            let streamed = joined(got.split_off(after_reset));
            assert!(whole.starts_with(&streamed), "{streamed:?}");
            assert!(whole.len() - streamed.len() <= 3, "held back: {:?}", &whole[streamed.len()..]);
            deltas.finish(&run, 1, &mut round);
            let rest = received(&mut receiver);
            assert_eq!(format!("{streamed}{}", joined(rest.clone())), whole);
            for piece in got.into_iter().chain(rest) {
                let LiveText::Text(piece) = piece else { continue };
                let lower = piece.to_ascii_lowercase();
                for form in &forms {
                    for at in 0..form.len() - 8 {
                        assert!(!lower.contains(&form[at..at + 8]), "{piece:?} holds part of the key");
                    }
                }
            }
        }
    }
}
