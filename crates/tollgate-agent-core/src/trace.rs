//! A run's trace context (docs/telemetry.md): the OpenTelemetry trace a run's spans belong to, stored
//! with the run when it is created so that every process that drives, decides or expires it later — on
//! this node or another — continues the same trace.
//!
//! It is written as a W3C `traceparent` (version `00`): `00-<trace id, 32 hex>-<span id, 16 hex>-<flags,
//! 2 hex>`. The span id is the run's root span (its first segment); the `sampled` flag is the sampling
//! decision made once, at creation, which every later process follows.
//!
//! A run started inside a caller's trace (a `traceparent` header on `POST /v1/runs`, `TRACEPARENT` for
//! the CLI) joins it ([`TraceContext::joining`]): the caller's trace id and sampling decision, and the
//! caller's span as the parent of the run's root span ([`TraceContext::parent`], stored beside it).

use std::fmt;

/// The trace a run belongs to: its trace id, the id of its root span and whether it is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The W3C trace id (never all zeros).
    pub trace_id: [u8; 16],
    /// The run's root span id (never all zeros).
    pub span_id: [u8; 8],
    /// Whether the run's spans are recorded.
    pub sampled: bool,
    /// The caller's span the root span is a child of, when the run joined a caller's trace; `None`
    /// when the root span is the trace's root. Not part of the `traceparent` text.
    pub parent: Option<[u8; 8]>,
}

/// A `traceparent` that is not one [`TraceContext::parse`] accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zeros): {0:?}")]
pub struct TraceContextError(String);

impl TraceContext {
    /// A new trace from 32 random bytes (16 for the trace id, 8 for the span id, 8 for sampling):
    /// sampled when the last 8, read as a fraction of 2^64, are below `ratio` (1.0 samples all, 0.0
    /// none). An id drawn as all zeros, which W3C forbids, is made 1.
    pub fn from_random(random: [u8; 32], ratio: f64) -> TraceContext {
        let mut trace_id = [0; 16];
        let mut span_id = [0; 8];
        trace_id.copy_from_slice(&random[..16]);
        span_id.copy_from_slice(&random[16..24]);
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        if span_id == [0; 8] {
            span_id[7] = 1;
        }
        let mut draw = [0; 8];
        draw.copy_from_slice(&random[24..]);
        // The draw as a fraction in [0, 1): its top 53 bits, exactly representable.
        #[allow(clippy::cast_precision_loss)]
        let fraction = (u64::from_be_bytes(draw) >> 11) as f64 / (1u64 << 53) as f64;
        let sampled = ratio >= 1.0 || fraction < ratio;
        TraceContext { trace_id, span_id, sampled, parent: None }
    }

    /// A run's context inside the caller's trace `caller` (a parsed `traceparent`): the caller's trace
    /// id and sampling decision (the caller decided; no ratio applies), a root span id from `random`
    /// (made 1 if all zeros), and the caller's span as its parent.
    pub fn joining(caller: TraceContext, random: [u8; 8]) -> TraceContext {
        let span_id = if random == [0; 8] { [0, 0, 0, 0, 0, 0, 0, 1] } else { random };
        TraceContext { trace_id: caller.trace_id, span_id, sampled: caller.sampled, parent: Some(caller.span_id) }
    }

    /// This context with `parent` as its root span's parent, given as 16 lowercase hex digits (the form
    /// [`TraceContext::parent_hex`] writes).
    ///
    /// # Errors
    /// [`TraceContextError`] when `parent` is not 16 lowercase hex digits, or is all zeros.
    pub fn with_parent_hex(self, parent: &str) -> Result<TraceContext, TraceContextError> {
        let mut id = [0; 8];
        let valid = lower_hex(parent) && hex::decode_to_slice(parent, &mut id).is_ok() && id != [0; 8];
        if !valid {
            return Err(TraceContextError(parent.chars().take(64).collect()));
        }
        Ok(TraceContext { parent: Some(id), ..self })
    }

    /// The parent span id as 16 lowercase hex digits, when there is one.
    pub fn parent_hex(&self) -> Option<String> {
        self.parent.map(hex::encode)
    }

    /// Parses a W3C `traceparent` of version `00`.
    ///
    /// # Errors
    /// [`TraceContextError`] for anything else (shown in the error, cut to 64 characters).
    pub fn parse(text: &str) -> Result<TraceContext, TraceContextError> {
        let refuse = || TraceContextError(text.chars().take(64).collect());
        let mut parts = text.split('-');
        let (Some("00"), Some(trace), Some(span), Some(flags), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(refuse());
        };
        let mut trace_id = [0; 16];
        let mut span_id = [0; 8];
        let mut flag = [0; 1];
        if !(lower_hex(trace) && lower_hex(span) && lower_hex(flags)) {
            return Err(refuse());
        }
        hex::decode_to_slice(trace, &mut trace_id).map_err(|_| refuse())?;
        hex::decode_to_slice(span, &mut span_id).map_err(|_| refuse())?;
        hex::decode_to_slice(flags, &mut flag).map_err(|_| refuse())?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(refuse());
        }
        Ok(TraceContext { trace_id, span_id, sampled: flag[0] & 1 == 1, parent: None })
    }

    /// Parses a `traceparent` as a receiver of one reads it (W3C Trace Context): optional white space
    /// around it; a later version than `00` read by its first four fields (what follows them must start
    /// with `-`); version `ff`, and anything [`TraceContext::parse`] refuses, refused. The server reads
    /// a `traceparent` header so, the CLI its `TRACEPARENT`.
    ///
    /// # Errors
    /// [`TraceContextError`] for a value a receiver must ignore.
    pub fn parse_received(text: &str) -> Result<TraceContext, TraceContextError> {
        let text = text.trim_matches([' ', '\t']);
        let later = text.get(..2).is_some_and(|version| version != "00" && version != "ff" && lower_hex(version))
            && text.as_bytes().get(55).is_none_or(|b| *b == b'-');
        match text.get(2..55) {
            Some(fields) if later => TraceContext::parse(&format!("00{fields}"))
                .map_err(|_| TraceContextError(text.chars().take(64).collect())),
            _ => TraceContext::parse(text),
        }
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
}

/// Whether `text` is only digits and lowercase `a`-`f` (W3C refuses uppercase).
fn lower_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl fmt::Display for TraceContext {
    /// The `traceparent` text of the run's root span (the parent is not part of it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = u8::from(self.sampled);
        write!(f, "00-{}-{}-{flags:02x}", hex::encode(self.trace_id), hex::encode(self.span_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_bad_ones_are_refused() -> Result<(), TraceContextError> {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceContext::parse(text)?;
        assert!(parsed.sampled);
        assert_eq!(parsed.to_string(), text);
        assert_eq!(parsed.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!TraceContext::parse(unsampled)?.sampled);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e47é6-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn a_joined_context_keeps_the_callers_trace_and_decision() -> Result<(), TraceContextError> {
        let caller = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")?;
        let joined = TraceContext::joining(caller, [7; 8]);
        assert_eq!((joined.trace_id, joined.span_id, joined.sampled), (caller.trace_id, [7; 8], false));
        assert_eq!(joined.parent_hex().as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(joined.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-0707070707070707-00");
        assert_eq!(TraceContext::joining(caller, [0; 8]).span_id, [0, 0, 0, 0, 0, 0, 0, 1]);
        // Stored as two texts, read back as one context.
        let stored = TraceContext::parse(&joined.to_string())?.with_parent_hex("00f067aa0ba902b7")?;
        assert_eq!(stored, joined);
        for bad in ["", "0000000000000000", "00F067AA0BA902B7", "00f067aa0ba902b", "00f067aa0ba902b7a"] {
            assert!(joined.with_parent_hex(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn sampling_follows_the_ratio_and_ids_are_never_zero() {
        let mut random = [0u8; 32];
        let zero = TraceContext::from_random(random, 1.0);
        assert!(zero.sampled && zero.trace_id != [0; 16] && zero.span_id != [0; 8]);
        assert!(!TraceContext::from_random(random, 0.0).sampled);
        random[24] = 2; // 2/256 = 0.78 % < 1 %
        assert!(TraceContext::from_random(random, 0.01).sampled);
        random[24] = 3; // 3/256 = 1.17 % > 1 %
        assert!(!TraceContext::from_random(random, 0.01).sampled);
        let sampled = (0..=255u8).filter(|b| TraceContext::from_random([*b; 32], 0.25).sampled).count();
        assert_eq!(sampled, 64);
    }
}
