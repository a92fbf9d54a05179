//! Group statements of the PostgreSQL store: the ready reads or writes of different runs, made as one
//! statement per kind, the way the SQLite writer commits the writes waiting for it in one transaction.
//!
//! At most [`Groups::new`]'s `limit` statements of a kind run at once. An operation that finds a place
//! free and nobody waiting runs alone, at once, with its own statement: one at a time nothing changes.
//! One that finds every place taken waits in the queue; when a statement ends, the operations waiting
//! (up to [`MAX_GROUP`], at most one per run) go together in the next one, on a task of its own so that
//! no caller's cancellation stops the others' statement. Under load one statement thus serves many
//! runs for the price of one: one round trip, one executor start-up and, for a write, one commit and
//! one `fdatasync`.
//!
//! Each operation's answer is its own: a grouped statement reports, run by run, what the statement
//! alone would have (a write: written, or its compare-and-set did not hold and the caller takes its
//! usual path; a read: the row, or none). A grouped statement that fails for a reason of the data
//! (a value refused, a damaged row) is not allowed to fail its neighbours: each of its operations is
//! made again alone and gets the answer of its own statement. One that fails because the server could
//! not be reached, or is read only, or full, gives each of its operations that error, as each would
//! have got alone: whether a write committed is then unknown to each of them alike.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::sync::oneshot;
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::store::StoreError;

/// The most operations one grouped statement carries.
pub(crate) const MAX_GROUP: usize = 64;

/// What an operation is answered: what its statement says of its run, or an error.
pub(crate) type Answer<O> = Result<O, StoreError>;

/// An operation that can be grouped: it names its run (a group holds at most one per run).
pub(crate) trait Grouped: Send + 'static {
    fn run_id(&self) -> &str;
}

/// Makes the statement of a group (of one or more, never two of one run) and answers each operation,
/// in order; the instant is when the group's oldest operation began (its waits for a place and for a
/// connection together are bounded as one wait for a connection alone would be). Given with each
/// operation (it holds the store, which holds the queue: kept in the queue it would keep the store
/// alive for ever).
pub(crate) type Runner<W, O> = Arc<dyn Fn(Vec<W>, Instant) -> BoxFuture<'static, Vec<Answer<O>>> + Send + Sync>;

/// An operation waiting in the queue, where its answer goes, and when it began.
type Waiting<W, O> = (W, oneshot::Sender<Answer<O>>, Instant);

/// The queue of one kind of operation (see the module's documentation).
pub(crate) struct Groups<W, O> {
    state: Mutex<State<W, O>>,
    /// Statements of this kind at once.
    limit: usize,
}

/// How an operation goes: alone now, or answered by a group (the one to start, if a place was free).
enum Turn<W, O> {
    Alone(W),
    Queued(oneshot::Receiver<Answer<O>>, Option<Vec<Waiting<W, O>>>),
}

struct State<W, O> {
    queue: VecDeque<Waiting<W, O>>,
    /// Statements of this kind under way, alone or grouped.
    running: usize,
}

impl<W: Grouped, O: Send + 'static> Groups<W, O> {
    /// At most `limit` (at least 1) statements at once.
    pub(crate) fn new(limit: usize) -> Groups<W, O> {
        Groups { state: Mutex::new(State { queue: VecDeque::new(), running: 0 }), limit: limit.max(1) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<W, O>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `operation`: alone at once when a place is free and nobody waits, else in the next group.
    pub(crate) async fn run(self: &Arc<Self>, operation: W, runner: Runner<W, O>) -> Answer<O> {
        let turn = {
            let mut state = self.state();
            if state.running < self.limit && state.queue.is_empty() {
                state.running += 1;
                Turn::Alone(operation)
            } else {
                let (sender, receiver) = oneshot::channel();
                state.queue.push_back((operation, sender, Instant::now()));
                // A place may be free with operations waiting only for a moment (between a statement's
                // end and its next group): start that group here.
                let group = (state.running < self.limit).then(|| {
                    state.running += 1;
                    take_group(&mut state.queue)
                });
                Turn::Queued(receiver, group)
            }
        };
        match turn {
            Turn::Alone(operation) => {
                // On this caller's task: its place is given on however the operation ends.
                let place = Place(Arc::clone(self), Arc::clone(&runner));
                let answer = runner(vec![operation], Instant::now()).await.pop().unwrap_or_else(|| Err(dropped()));
                drop(place);
                answer
            }
            Turn::Queued(receiver, group) => {
                if let Some(group) = group {
                    self.spawn(group, runner);
                }
                receiver.await.unwrap_or_else(|_| Err(dropped()))
            }
        }
    }

    /// Makes `group`'s statement on a task of its own, answers each operation, then gives its place on.
    fn spawn(self: &Arc<Self>, group: Vec<Waiting<W, O>>, runner: Runner<W, O>) {
        let groups = Arc::clone(self);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to run on (it is shutting down): each waiting operation learns so.
            drop(group);
            groups.state().running -= 1;
            return;
        };
        runtime.spawn(async move {
            let place = Place(Arc::clone(&groups), Arc::clone(&runner));
            let since = group.iter().map(|(_, _, since)| *since).min().unwrap_or_else(Instant::now);
            let (operations, senders): (Vec<W>, Vec<_>) = group.into_iter().map(|(o, s, _)| (o, s)).unzip();
            let answers = runner(operations, since).await;
            let mut answers = answers.into_iter();
            for sender in senders {
                let _ = sender.send(answers.next().unwrap_or_else(|| Err(dropped())));
            }
            drop(place);
        });
    }

    /// A statement ended: its place goes to the operations waiting, if any.
    fn ended(self: &Arc<Self>, runner: &Runner<W, O>) {
        let mut state = self.state();
        if state.queue.is_empty() {
            state.running -= 1;
            return;
        }
        let group = take_group(&mut state.queue);
        drop(state);
        self.spawn(group, Arc::clone(runner));
    }
}

/// A place among the statements under way, given on when dropped (the operation ended, or its caller
/// dropped it), with the runner of the next group.
struct Place<W: Grouped, O: Send + 'static>(Arc<Groups<W, O>>, Runner<W, O>);

impl<W: Grouped, O: Send + 'static> Drop for Place<W, O> {
    fn drop(&mut self) {
        self.0.ended(&self.1);
    }
}

/// The operations that go next: from the front of the queue, up to [`MAX_GROUP`], one per run (a later
/// one of a run already in the group waits for the next group, keeping its place in the queue).
fn take_group<W: Grouped, O>(queue: &mut VecDeque<Waiting<W, O>>) -> Vec<Waiting<W, O>> {
    let mut group = Vec::new();
    let mut runs = HashSet::new();
    let mut later = VecDeque::new();
    while group.len() < MAX_GROUP {
        let Some(entry) = queue.pop_front() else { break };
        if runs.insert(entry.0.run_id().to_owned()) {
            group.push(entry);
        } else {
            later.push_back(entry);
        }
    }
    while let Some(entry) = later.pop_back() {
        queue.push_front(entry);
    }
    group
}

/// Whether a grouped statement that failed with `error` leaves each of its operations to be made
/// again alone (a reason of the data), rather than giving each the error (a reason of the server).
pub(crate) fn each_alone_after(error: &StoreError) -> bool {
    matches!(error, StoreError::Database(_) | StoreError::CorruptDatabase(_) | StoreError::Corrupt { .. })
}

fn dropped() -> StoreError {
    StoreError::Database("the grouped statement was dropped before it answered (the runtime is shutting down)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Notify;

    struct Write(String);

    impl Grouped for Write {
        fn run_id(&self) -> &str {
            &self.0
        }
    }

    /// A runner that records each group's runs, holds every statement until `gate` is notified, and
    /// answers `false` for runs named `lost`.
    fn recording(
        groups: Arc<Mutex<Vec<Vec<String>>>>,
        gate: Arc<Notify>,
        running: Arc<AtomicUsize>,
    ) -> Runner<Write, bool> {
        Arc::new(move |writes: Vec<Write>, _| {
            let groups = Arc::clone(&groups);
            let gate = Arc::clone(&gate);
            let running = Arc::clone(&running);
            Box::pin(async move {
                running.fetch_add(1, Ordering::SeqCst);
                let ids: Vec<String> = writes.iter().map(|w| w.0.clone()).collect();
                groups.lock().unwrap_or_else(PoisonError::into_inner).push(ids.clone());
                gate.notified().await;
                running.fetch_sub(1, Ordering::SeqCst);
                ids.iter().map(|id| Ok(id != "lost")).collect()
            })
        })
    }

    /// One operation alone runs at once on its own; operations arriving while the places are taken
    /// wait and then go together, one per run, each answered its own answer; never more statements at
    /// once than the limit.
    #[tokio::test]
    async fn writes_wait_for_a_place_then_go_together_one_per_run_each_with_its_own_answer() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Notify::new());
        let running = Arc::new(AtomicUsize::new(0));
        let groups = Arc::new(Groups::new(1));
        let writer = recording(Arc::clone(&seen), Arc::clone(&gate), Arc::clone(&running));
        let first = tokio::spawn({
            let (groups, writer) = (Arc::clone(&groups), Arc::clone(&writer));
            async move { groups.run(Write("a".into()), writer).await }
        });
        while seen.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
            tokio::task::yield_now().await;
        }
        let mut waiting = Vec::new();
        for id in ["b", "lost", "b", "c"] {
            let (groups, writer) = (Arc::clone(&groups), Arc::clone(&writer));
            waiting.push(tokio::spawn(async move { groups.run(Write(id.into()), writer).await }));
            tokio::task::yield_now().await;
        }
        while groups.state().queue.len() < 4 {
            tokio::task::yield_now().await;
        }
        // Release statements one at a time until every write is answered.
        let mut answers = Vec::new();
        gate.notify_one();
        answers.push(first.await.unwrap_or_else(|e| panic!("{e}")));
        for handle in waiting {
            while !handle.is_finished() {
                gate.notify_one();
                tokio::task::yield_now().await;
            }
            answers.push(handle.await.unwrap_or_else(|e| panic!("{e}")));
        }
        let answers: Vec<bool> = answers.into_iter().map(|a| a.unwrap_or_else(|e| panic!("{e}"))).collect();
        assert_eq!(answers, [true, true, false, true, true]);
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert_eq!(seen, [vec!["a"], vec!["b", "lost", "c"], vec!["b"]]);
        assert_eq!(running.load(Ordering::SeqCst), 0);
        assert_eq!(groups.state().running, 0, "every place was given back");
    }

    /// A caller that drops its operation while it runs alone gives its place back: the next one runs.
    #[tokio::test]
    async fn a_write_dropped_while_it_runs_gives_its_place_back() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Notify::new());
        let running = Arc::new(AtomicUsize::new(0));
        let groups = Arc::new(Groups::new(1));
        let writer = recording(Arc::clone(&seen), Arc::clone(&gate), Arc::clone(&running));
        let abandoned = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            groups.run(Write("a".into()), Arc::clone(&writer)),
        )
        .await;
        assert!(abandoned.is_err(), "the write was held at the gate");
        assert_eq!(groups.state().running, 0);
        let next = tokio::spawn({
            let (groups, writer) = (Arc::clone(&groups), Arc::clone(&writer));
            async move { groups.run(Write("b".into()), writer).await }
        });
        while !next.is_finished() {
            gate.notify_one();
            tokio::task::yield_now().await;
        }
        assert!(next.await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("{e}")));
    }
}
