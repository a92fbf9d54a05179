//! Persists the loop's progress: events are buffered and committed at the next durable point, and an
//! ask-gated call's `tool_started` is committed before the call runs (the execution ledger).

use crate::Inner;
use crate::events;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_core::{BoxFuture, Gate, HookError, LoopEvent, LoopHooks, NewEvent};

pub(crate) struct PersistHooks {
    inner: Arc<Inner>,
    run_id: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    buffer: Vec<NewEvent>,
    model_calls: u32,
    round: u32,
}

impl PersistHooks {
    pub(crate) fn new(inner: Arc<Inner>, run_id: String) -> Self {
        Self { inner, run_id, state: Mutex::new(State::default()) }
    }

    /// Events not yet committed; they go with the segment's closing transition.
    pub(crate) fn take_buffer(&self) -> Vec<NewEvent> {
        std::mem::take(&mut self.lock().buffer)
    }

    /// The last model call seen.
    pub(crate) fn round(&self) -> u32 {
        self.lock().round
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn flush(&self, events: Vec<NewEvent>) -> Result<(), HookError> {
        let until = self.inner.clock.now() + self.inner.lease_ms;
        let last_seq = self
            .inner
            .store
            .append(&self.run_id, &self.inner.node, events, until)
            .await
            .map_err(|e| HookError(e.to_string()))?;
        self.inner.notify_seq(&self.run_id, last_seq);
        Ok(())
    }
}

impl LoopHooks for PersistHooks {
    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        let now = self.inner.clock.now();
        let mut flush = None;
        {
            let mut state = self.lock();
            match event {
                LoopEvent::ModelRequest { round, messages, tools } => {
                    // The first model call of a segment rides with the segment's next durable write;
                    // later ones commit what the previous rounds did first, so a watcher sees progress.
                    if state.model_calls > 0 && !state.buffer.is_empty() {
                        flush = Some(std::mem::take(&mut state.buffer));
                    }
                    state.model_calls += 1;
                    state.round = round;
                    state.buffer.push(events::model_request(now, round, messages, tools));
                }
                LoopEvent::ModelResponse { round, response } => {
                    state.buffer.push(events::model_response(now, round, response));
                }
                LoopEvent::ToolStarted { round, call_id, tool, arguments, gate } => {
                    state.buffer.push(events::tool_started(now, round, &self.run_id, call_id, tool, arguments, gate));
                    if gate != Gate::Allow {
                        flush = Some(std::mem::take(&mut state.buffer));
                    }
                }
                LoopEvent::ToolFinished { round, result } => {
                    state.buffer.push(events::tool_finished(now, round, result));
                }
            }
        }
        Box::pin(async move {
            match flush {
                Some(events) => self.flush(events).await,
                None => Ok(()),
            }
        })
    }
}
