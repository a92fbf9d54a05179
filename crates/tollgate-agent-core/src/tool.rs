//! The `Tool` port, the gate verdicts, and the registry of tools offered to a model.
//!
//! The registry promises: names are unique, every schema compiles, and each tool's schema hash is computed
//! once over its canonical JSON so a suspension can pin exactly what a person approved against.

use crate::BoxFuture;
use crate::approval::Requirement;
use crate::canonical::canonical_sha256;
use crate::image::{
    ImageRefused, MAX_RESULT_IMAGE_BYTES, MAX_RESULT_IMAGES, ToolImage, image_size, refused_description,
};
use crate::metadata::Metadata;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_agent_protocol::{CallId, RunId};

/// The gate's verdict for one call: the wire's type, so a held call's `gate` and a tool's compare.
pub use tollgate_agent_protocol::Gate;

/// What a tool hands back to the model: text, and the images [`with_image`](Self::with_image) added
/// (each also described in the text; see [`crate::image`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text the model reads.
    pub content: String,
    /// True for an error the model should see (a missing file, a failed command).
    pub is_error: bool,
    images: Vec<ToolImage>,
}

impl ToolOutput {
    /// A normal result.
    pub fn text(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: false, images: Vec::new() }
    }

    /// An error result meant for the model, e.g. "no such file: a.txt".
    pub fn error(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: true, images: Vec::new() }
    }

    /// A normal result from raw bytes, repaired to valid UTF-8 (invalid sequences become U+FFFD).
    pub fn bytes(bytes: &[u8]) -> Self {
        Self::text(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Adds an image (`media_type`, its bytes in standard padded base64) after the text so far: the text
    /// gets a line describing it (`[image: image/png, 12 KB]`), and a provider that reads images gets the
    /// image too. One a model cannot be given (another type, bad base64, over a limit: see
    /// [`crate::image`]) is only described, with why.
    pub fn with_image(mut self, media_type: &str, base64: String) -> Self {
        let size = image_size(&base64);
        let kept = ToolImage::new(media_type, base64).and_then(|image| {
            let bytes: usize = self.images.iter().map(|i| i.base64().len()).sum();
            if self.images.len() >= MAX_RESULT_IMAGES || bytes + image.base64().len() > MAX_RESULT_IMAGE_BYTES {
                return Err(ImageRefused::ResultFull);
            }
            Ok(image)
        });
        let line = match kept {
            Ok(image) => {
                let line = image.description();
                self.images.push(image);
                line
            }
            Err(why) => refused_description(media_type, size, &why),
        };
        if !self.content.is_empty() {
            self.content.push('\n');
        }
        self.content.push_str(&line);
        self
    }

    /// The images the result carries, in the order they were added.
    pub fn images(&self) -> &[ToolImage] {
        &self.images
    }

    /// The result's parts: text, error flag, images.
    pub fn into_parts(self) -> (String, bool, Vec<ToolImage>) {
        (self.content, self.is_error, self.images)
    }
}

/// A tool's own failure: a service it calls is down, a file it needs cannot be read. Its text goes to the
/// process's log; the model is told only that the tool failed (docs/design.md: a tool's internal error
/// text is not shown to the model). An error the model should read and act on ("no order 42") is a
/// result instead: `Ok(ToolOutput::error(..))`.
///
/// Every error converts into one, so `?` works in a tool on whatever it calls; the message is the error
/// with its chain of sources ([`error_chain`](crate::error_chain)), and [`ErrorContext::context`] puts
/// what the tool was doing in front of it:
///
/// ```
/// use tollgate_agent_core::{ErrorContext, ToolError};
///
/// fn port(text: &str) -> Result<u16, ToolError> {
///     let port: u16 = text.parse()?; // a `ParseIntError` becomes a `ToolError`
///     Ok(port)
/// }
/// fn read_config(path: &str) -> Result<String, ToolError> {
///     std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
/// }
///
/// assert_eq!(port("80").ok(), Some(80));
/// assert_eq!(port("eighty").err().map(|e| e.message), Some("invalid digit found in string".to_owned()));
/// let missing = read_config("/no/such/file").err().map(|e| e.message).unwrap_or_default();
/// assert!(missing.starts_with("reading /no/such/file: "), "{missing}");
/// ```
///
/// It is not itself a [`std::Error`](std::error::Error) — as `anyhow::Error` is not: that is what
/// lets every error convert into it. It converts into `Box<dyn Error + Send + Sync>` for code that
/// collects errors that way.
#[derive(Debug)]
pub struct ToolError {
    /// What went wrong, for the operator: the error and its sources, or the text given.
    pub message: String,
}

impl ToolError {
    /// A failure with a message for the log.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    /// The same failure with what the tool was doing in front: `"{context}: {message}"`.
    pub fn context(self, context: impl std::fmt::Display) -> Self {
        Self { message: format!("{context}: {}", self.message) }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    /// The error with its chain of sources as the message.
    fn from(error: E) -> Self {
        Self::new(crate::display::error_chain(&error))
    }
}

/// A [`ToolError`] boxed as a standard error (its message, no source).
#[derive(Debug)]
struct FailedTool(String);

impl std::fmt::Display for FailedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FailedTool {}

impl From<ToolError> for Box<dyn std::error::Error + Send + Sync> {
    fn from(error: ToolError) -> Self {
        Box::new(FailedTool(error.message))
    }
}

impl From<ToolError> for Box<dyn std::error::Error> {
    fn from(error: ToolError) -> Self {
        Box::new(FailedTool(error.message))
    }
}

/// What a tool was doing when something failed, in front of the failure: `.context(..)` on a `Result`
/// whose error converts into a [`ToolError`] (any error, or a `ToolError`) or on an `Option` (`None`
/// becomes the context alone). See [`ToolError`].
pub trait ErrorContext<T> {
    /// The value, or a [`ToolError`] reading `"{context}: {error}"` (`"{context}"` for a `None`).
    fn context(self, context: impl std::fmt::Display) -> Result<T, ToolError>;

    /// [`context`](Self::context) with the context made only on failure.
    fn with_context<C: std::fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, ToolError>;
}

impl<T, E> ErrorContext<T> for Result<T, E>
where
    ToolError: From<E>,
{
    fn context(self, context: impl std::fmt::Display) -> Result<T, ToolError> {
        self.map_err(|error| ToolError::from(error).context(context))
    }

    fn with_context<C: std::fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, ToolError> {
        self.map_err(|error| ToolError::from(error).context(context()))
    }
}

impl<T> ErrorContext<T> for Option<T> {
    fn context(self, context: impl std::fmt::Display) -> Result<T, ToolError> {
        self.ok_or_else(|| ToolError::new(context.to_string()))
    }

    fn with_context<C: std::fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, ToolError> {
        self.ok_or_else(|| ToolError::new(context().to_string()))
    }
}

/// What a tool learns about the call it serves: the run, the call, the run's metadata. Its gate gets it
/// too ([`Tool::gate`]), so a gate can decide by the run as well as by the arguments (by the customer in
/// the metadata, say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolContext {
    /// The run the call belongs to.
    pub run_id: RunId,
    /// The model's id for the call.
    pub call_id: CallId,
    /// The run's metadata, as given when it was started (empty when none was).
    pub metadata: Metadata,
    /// What the call's preview observed ([`Preview::observed`]), when a person approved the call on that
    /// preview: the tool checks it still holds before acting, and touches nothing if it does not.
    /// `None` for a call that runs without a person's decision (gate allow), for a call run with arguments
    /// an approver edited (the new arguments were never previewed), and for a preview that observed nothing.
    pub observed: Option<Value>,
}

impl ToolContext {
    /// The context of call `call_id` of run `run_id`, without metadata or observation.
    pub fn new(run_id: impl Into<RunId>, call_id: impl Into<CallId>) -> Self {
        Self { run_id: run_id.into(), call_id: call_id.into(), metadata: Metadata::new(), observed: None }
    }

    /// The context a tool's gate is asked with outside any run: a listing of the tools (`GET /v1/tools`,
    /// `tollgate tools`) shows the gate of the arguments `{}` under it. No run, no call (both ids empty),
    /// no metadata.
    pub fn listing() -> Self {
        Self::new("", "")
    }

    /// The same context with this metadata.
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The same context with what the approved preview observed.
    pub fn with_observed(mut self, observed: Option<Value>) -> Self {
        self.observed = observed;
        self
    }

    /// A key unique to this call of this run, for tools that talk to systems with idempotency keys.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.run_id, self.call_id)
    }
}

/// The run a segment of the loop serves: what every [`ToolContext`] of the segment is made from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunScope {
    /// The run's id.
    pub run_id: RunId,
    /// The run's metadata (stored with the run, so a resume in another process has it too).
    pub metadata: Metadata,
}

impl RunScope {
    /// The scope of run `run_id`, without metadata.
    pub fn new(run_id: impl Into<RunId>) -> Self {
        Self { run_id: run_id.into(), metadata: Metadata::new() }
    }

    /// The same scope with this metadata.
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The context a tool gets for call `call_id` of this run.
    pub fn tool_context(&self, call_id: impl Into<CallId>) -> ToolContext {
        ToolContext::new(self.run_id.clone(), call_id).with_metadata(self.metadata.clone())
    }
}

/// What the approver sees for one call, and the state of the world it was made from.
///
/// A tool whose call acts on something that may change while the call waits for a person (a file it
/// diffs, a folder it would delete) records here what it judged. The observation is stored with the held
/// call and bound into the turn's digest; when the call runs on that approval, its [`ToolContext`] carries
/// the observation back ([`ToolContext::observed`]) and the tool compares it with what is there now.
/// Its shape is the tool's own: core only stores, digests and hands it back.
#[derive(Clone, Debug, PartialEq)]
pub struct Preview {
    /// The text the approver reads.
    pub text: String,
    /// What the text was made from (`None`: nothing to check when the call runs; a JSON `null` counts as
    /// `None`).
    pub observed: Option<Value>,
}

impl Preview {
    /// A preview with nothing observed.
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into(), observed: None }
    }

    /// The same preview with what it was made from.
    pub fn with_observed(mut self, observed: Value) -> Self {
        self.observed = Some(observed);
        self
    }
}

impl From<String> for Preview {
    /// A preview with nothing observed.
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

impl From<&str> for Preview {
    /// A preview with nothing observed.
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

/// A path argument of a call as operator policy judges it (see [`Tool::policy_paths`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyPath {
    /// The JSON pointer of the argument (`/path`), as a policy matcher names it.
    pub pointer: String,
    /// The path the call acts on, normalised: relative to the tool's root, `/`-separated, without `.`,
    /// `..`, repeated or trailing `/` (`.` for the root itself). A policy matcher on `pointer` reads this
    /// instead of the raw argument, which may be absent (the tool's default path) or spelled otherwise.
    pub path: String,
    /// True when the call acts on everything beneath `path` too (a recursive delete, a search): a rule
    /// that forbids or asks matches such a call when it matches any path beneath.
    pub subtree: bool,
}

/// A capability offered to the model.
///
/// `validate`, `gate` and `preview` must not have side effects: they run while the whole turn is checked,
/// before any call of it executes. `gate` is a pure function of the arguments and the call's context;
/// `validate` and `preview` may look at the world (a file's type, its current content) and are
/// asynchronous so that a tool can do that I/O off the async workers, with a time bound of its own. A panic in any method is caught and turned
/// into an error result for that call.
pub trait Tool: Send + Sync {
    /// The name the model calls it by; unique in a registry.
    fn name(&self) -> &str;

    /// What the tool does, for the model.
    fn description(&self) -> &str;

    /// JSON schema of the arguments (an object schema).
    fn parameters(&self) -> &Value;

    /// Checks beyond the schema that make a call impossible to run (e.g. a path outside the workspace).
    /// An `Err` refuses the call before any gate, with the message as the model's error result.
    fn validate<'a>(&'a self, _args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The gate for these arguments in this run. Allow by default. `ctx` is the call's context (its
    /// run, call id and the run's metadata; nothing observed yet), or [`ToolContext::listing`] when a
    /// listing asks. The gate is asked again, with the same context, when a person edits the call's
    /// arguments and when the call resumes: a run's metadata is fixed for its life, so it answers alike.
    fn gate(&self, _args: &Value, _ctx: &ToolContext) -> Gate {
        Gate::Allow
    }

    /// How many distinct people must approve a call its [`gate`](Self::gate) asks about: one (any
    /// decision) by default; a quorum of N takes N `approve` decisions from distinct actors, and a single
    /// `deny` denies it. Pure, like `gate`. Operator policy sets it with a rule's `approvals = N`.
    fn requirement(&self, _args: &Value) -> Requirement {
        Requirement::SINGLE
    }

    /// What the approver sees, e.g. a diff. None by default.
    fn preview<'a>(&'a self, _args: &'a Value) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(None))
    }

    /// The preview together with the state it was made from ([`Preview`]); this is what the loop asks
    /// when it holds a turn. By default, [`preview`](Self::preview)'s text with nothing observed. A tool
    /// that records an observation implements this (and `preview` as its text) and checks the
    /// observation in `call` against [`ToolContext::observed`].
    fn observed_preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<Preview>> {
        Box::pin(async move { self.preview(args).await.map(Preview::from) })
    }

    /// The path arguments of a call as operator policy should judge them: normalised, relative to the
    /// tool's root, marked when the call acts on everything beneath. Pure, like [`gate`](Self::gate);
    /// none by default (policy then reads the raw arguments).
    fn policy_paths(&self, _args: &Value) -> Vec<PolicyPath> {
        Vec::new()
    }

    /// Whether a grant may allow a call with these arguments that the gate asks about (V2.md, grants):
    /// yes by default; operator policy says no for a call its deciding rule marks `grantable = false`.
    /// Pure, like [`gate`](Self::gate).
    fn grantable(&self, _args: &Value) -> bool {
        true
    }

    /// Whether no grant may be made for this tool at all: a policy rule naming it says `grantable =
    /// false` (a grant is then refused when it is made). False by default.
    fn refuses_grants(&self) -> bool {
        false
    }

    /// The narrowest useful grant `match` for calls like this one (V2.md, "Settled details"): by default
    /// every top-level argument by equality, paths as resolved
    /// ([`exact_match_resolved`](crate::exact_match_resolved)); a file tool proposes its
    /// folder (`{"/path": "notes/*"}`), the shell the exact `argv`. Pure, like [`gate`](Self::gate).
    fn suggested_match(&self, args: &Value) -> serde_json::Map<String, Value> {
        crate::grant::exact_match_resolved(args, &self.policy_paths(args))
    }

    /// Performs the call.
    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// The name, description and argument schema of a tool, as offered to a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// The tool's description.
    pub description: String,
    /// The JSON schema of its arguments.
    pub parameters: Value,
}

/// A tool's name and the hash of its argument schema, pinned in a suspension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolPin {
    /// The tool's name.
    pub name: String,
    /// `sha256:` + hex of the canonical JSON of its schema.
    pub schema_hash: String,
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two tools share a name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The tool's argument schema is not a valid JSON schema.
    #[error("tool `{name}` has an invalid argument schema: {message}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// The schema compiler's message.
        message: String,
    },
}

/// A registered tool with its compiled schema.
pub struct RegisteredTool {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
    schema_hash: String,
}

impl RegisteredTool {
    /// The tool itself.
    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }

    /// `sha256:` + hex of the canonical JSON of the tool's schema.
    pub fn schema_hash(&self) -> &str {
        &self.schema_hash
    }

    /// Checks arguments against the schema; the error lists each violation with its JSON pointer.
    pub fn check_arguments(&self, args: &Value) -> Result<(), String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
            })
            .collect();
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }
}

/// The set of tools offered to a model; refuses duplicate names.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<RegisteredTool>,
    by_name: HashMap<String, usize>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; refuses a duplicate name or a schema that does not compile.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_owned();
        if self.by_name.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let validator = jsonschema::validator_for(tool.parameters())
            .map_err(|e| RegistryError::InvalidSchema { name: name.clone(), message: e.to_string() })?;
        let schema_hash = format!("sha256:{}", canonical_sha256(tool.parameters()));
        self.by_name.insert(name, self.tools.len());
        self.tools.push(RegisteredTool { tool, validator, schema_hash });
        Ok(())
    }

    /// Builder form of [`register`](Self::register).
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Result<Self, RegistryError> {
        self.register(tool)?;
        Ok(self)
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.by_name.get(name).and_then(|i| self.tools.get(*i))
    }

    /// Every tool, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.iter()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The specs offered to the model, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.tool.name().to_owned(),
                description: t.tool.description().to_owned(),
                parameters: t.tool.parameters().clone(),
            })
            .collect()
    }

    /// Name and schema hash of every tool.
    pub fn pins(&self) -> Vec<ToolPin> {
        self.tools
            .iter()
            .map(|t| ToolPin { name: t.tool.name().to_owned(), schema_hash: t.schema_hash.clone() })
            .collect()
    }
}
