//! Typed tools: a tool whose arguments are a Rust type, with the JSON schema the model is offered derived
//! from that type.
//!
//! Implement [`TypedTool`] for a tool with state or with checks that look at the world, or make one from a
//! closure with [`tool_fn`]; [`IntoTool`] turns either (or any [`Tool`]) into the `Arc<dyn Tool>` a
//! [`ToolRegistry`](crate::ToolRegistry) takes.
//!
//! The promises: the argument schema is derived once, when the tool is wrapped, as the plain schema a model
//! expects (see [`args_schema`]); the tool's own code sees its arguments only as `Args`, deserialised
//! from the call's JSON; and arguments that do not deserialise never reach that code. The loop checks a
//! call against the schema, then `validate`s it, gates it, previews it if it asks, and calls it; for
//! arguments that pass the schema yet do not deserialise (a value out of a type's range, a failed custom
//! `Deserialize`), `validate` refuses the call with the deserialiser's message for the model, `preview`
//! is `None`, `call` is an error result with that message, and `gate` answers the tool's declared
//! [`GATE`](TypedTool::GATE). That last answer lets nothing through: such a call is refused before its
//! gate is asked and cannot run, since `call` itself refuses it. It is what listings show for a tool,
//! which ask the gate of the empty arguments `{}`.

use crate::BoxFuture;
use crate::approval::Requirement;
use crate::tool::{Gate, PolicyPath, Preview, Tool, ToolContext, ToolError, ToolOutput};
use schemars::Schema;
use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::future::Future;
use std::sync::Arc;

/// `schemars`, whose derive typed tools' arguments use (`#[derive(JsonSchema)]`): re-exported so that a
/// tool can name the version this crate builds its schemas with.
pub use schemars;
pub use schemars::JsonSchema;

/// A tool whose arguments are a Rust type: a `#[derive(Deserialize, JsonSchema)]` struct, its doc comments
/// the fields' descriptions for the model.
///
/// The loop deserialises the arguments once per method and hands them over typed; the schema offered to
/// the model is derived from `Args` (see [`args_schema`]). Turn a typed tool into a registry entry with
/// [`IntoTool::into_tool`] (or wrap it in [`Typed`]). What holds for [`Tool`] holds here: `validate`,
/// `gate` and `preview` must not have side effects, and a panic anywhere becomes an error result.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use tollgate_agent_core::{Gate, IntoTool, ToolContext, ToolError, ToolOutput, TypedTool};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct TransferArgs {
///     /// Who is paid.
///     to: String,
///     /// How much, in cents.
///     cents: u64,
/// }
///
/// struct Transfer;
///
/// impl TypedTool for Transfer {
///     type Args = TransferArgs;
///     const NAME: &str = "transfer";
///     const DESCRIPTION: &str = "Transfers money to someone.";
///     const GATE: Gate = Gate::Ask;
///     async fn call(&self, args: TransferArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(format!("sent {} cents to {}", args.cents, args.to).into())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let tool = Transfer.into_tool();
/// assert_eq!(tool.parameters()["required"], serde_json::json!(["to", "cents"]));
/// let args = serde_json::json!({"to": "bob", "cents": 250});
/// assert_eq!(tool.gate(&args, &ToolContext::new("run-1", "call-1")), Gate::Ask);
/// let output = tool.call(args, ToolContext::new("run-1", "call-1")).await;
/// assert_eq!(output.map(|o| o.content).ok().as_deref(), Some("sent 250 cents to bob"));
/// # }
/// ```
pub trait TypedTool: Send + Sync {
    /// The arguments. A struct (so that the schema is an object schema); `#[serde(deny_unknown_fields)]`
    /// makes the schema refuse other keys.
    type Args: DeserializeOwned + JsonSchema + Send + Sync + 'static;

    /// The name the model calls it by; unique in a registry.
    const NAME: &'static str;

    /// What the tool does, for the model.
    const DESCRIPTION: &'static str;

    /// The tool's gate: of every call unless [`gate`](Self::gate) decides by the arguments, of arguments
    /// that do not deserialise, and the one listings show. A tool whose `gate` looks at the arguments
    /// should declare here the strictest verdict `gate` can give. Allow by default.
    const GATE: Gate = Gate::Allow;

    /// Checks beyond the schema that make a call impossible to run (e.g. a path outside the workspace).
    /// An `Err` refuses the call before any gate, with the message as the model's error result.
    fn validate(&self, _args: &Self::Args) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }

    /// The gate for these arguments in this run: [`GATE`](Self::GATE) by default. `ctx` is the call's
    /// context ([`Tool::gate`]): a gate may decide by the run's metadata as well as by the arguments.
    ///
    /// ```
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    /// use tollgate_agent_core::{Gate, IntoTool, Metadata, ToolContext, ToolError, ToolOutput, TypedTool};
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct RefundArgs {
    ///     /// Euros.
    ///     amount: u32,
    /// }
    ///
    /// /// Refunds up to each customer's own limit without asking; above it, a person decides.
    /// struct Refund;
    ///
    /// impl TypedTool for Refund {
    ///     type Args = RefundArgs;
    ///     const NAME: &str = "refund";
    ///     const DESCRIPTION: &str = "Refunds the customer.";
    ///     const GATE: Gate = Gate::Ask;
    ///     fn gate(&self, args: &RefundArgs, ctx: &ToolContext) -> Gate {
    ///         let limit = match ctx.metadata.get("customer").and_then(|c| c.as_str()) {
    ///             Some("c-gold") => 500,
    ///             Some(_) => 50,
    ///             None => 0, // no customer: always ask
    ///         };
    ///         if args.amount <= limit { Gate::Allow } else { Gate::Ask }
    ///     }
    ///     async fn call(&self, args: RefundArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    ///         Ok(format!("refunded {} EUR", args.amount).into())
    ///     }
    /// }
    ///
    /// let refund = Refund.into_tool();
    /// let customer = |id: &str| {
    ///     let metadata = Metadata::try_from(serde_json::json!({"customer": id})).unwrap_or_default();
    ///     ToolContext::new("run-1", "call-1").with_metadata(metadata)
    /// };
    /// let args = serde_json::json!({"amount": 200});
    /// assert_eq!(refund.gate(&args, &customer("c-gold")), Gate::Allow);
    /// assert_eq!(refund.gate(&args, &customer("c-new")), Gate::Ask);
    /// assert_eq!(refund.gate(&args, &ToolContext::listing()), Gate::Ask);
    /// ```
    fn gate(&self, _args: &Self::Args, _ctx: &ToolContext) -> Gate {
        Self::GATE
    }

    /// How many distinct people must approve a call the gate asks about: one by default; a quorum of
    /// N takes `approve` from N distinct actors, and one `deny` denies it ([`Tool::requirement`]).
    fn requirement(&self, _args: &Self::Args) -> Requirement {
        Requirement::SINGLE
    }

    /// What the approver sees, e.g. a diff. None by default.
    fn preview(&self, _args: &Self::Args) -> impl Future<Output = Option<String>> + Send {
        async { None }
    }

    /// The preview together with the state of the world it was made from (see [`Preview`]): implement
    /// this instead of [`preview`](Self::preview) when the call must check, before it acts, that what
    /// the approver judged still holds (it gets the observation back in [`ToolContext::observed`]).
    /// By default, `preview`'s text with nothing observed.
    fn observed_preview(&self, args: &Self::Args) -> impl Future<Output = Option<Preview>> + Send {
        async { self.preview(args).await.map(Preview::from) }
    }

    /// The path arguments as operator policy should judge them (see [`Tool::policy_paths`]): none by
    /// default.
    fn policy_paths(&self, _args: &Self::Args) -> Vec<PolicyPath> {
        Vec::new()
    }

    /// The narrowest useful grant `match` for calls like this one ([`Tool::suggested_match`]); `None`
    /// for the default, every argument by equality (paths as resolved). A suggestion that does not match
    /// the very call it is made for is not offered: the default is.
    fn suggested_match(&self, _args: &Self::Args) -> Option<serde_json::Map<String, Value>> {
        None
    }

    /// Performs the call. `Ok(ToolOutput::error(..))` is an error the model reads (a missing file); an
    /// `Err` is the tool's own failure, logged, and the model is told only that the tool failed.
    fn call(&self, args: Self::Args, ctx: ToolContext) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

/// A [`TypedTool`] as a [`Tool`], with its schema derived once.
pub struct Typed<T> {
    tool: T,
    schema: Value,
}

impl<T: TypedTool> Typed<T> {
    /// Wraps the tool, deriving its argument schema.
    pub fn new(tool: T) -> Self {
        Self { tool, schema: args_schema::<T::Args>() }
    }

    /// The typed tool inside.
    pub fn inner(&self) -> &T {
        &self.tool
    }
}

impl<T: TypedTool> Tool for Typed<T> {
    fn name(&self) -> &str {
        T::NAME
    }

    fn description(&self) -> &str {
        T::DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let args = parse::<T::Args>(args)?;
            self.tool.validate(&args).await
        })
    }

    fn gate(&self, args: &Value, ctx: &ToolContext) -> Gate {
        match parse::<T::Args>(args) {
            Ok(args) => self.tool.gate(&args, ctx),
            Err(_) => T::GATE,
        }
    }

    fn requirement(&self, args: &Value) -> Requirement {
        parse::<T::Args>(args).map_or(Requirement::SINGLE, |args| self.tool.requirement(&args))
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let args = parse::<T::Args>(args).ok()?;
            self.tool.observed_preview(&args).await.map(|preview| preview.text)
        })
    }

    fn observed_preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<Preview>> {
        Box::pin(async move {
            let args = parse::<T::Args>(args).ok()?;
            self.tool.observed_preview(&args).await
        })
    }

    fn policy_paths(&self, args: &Value) -> Vec<PolicyPath> {
        parse::<T::Args>(args).map(|args| self.tool.policy_paths(&args)).unwrap_or_default()
    }

    fn suggested_match(&self, args: &Value) -> serde_json::Map<String, Value> {
        let paths = self.policy_paths(args);
        let fits = |pattern: &serde_json::Map<String, Value>| {
            crate::GrantMatch::new(pattern.clone()).is_ok_and(|compiled| compiled.matches(args, &paths))
        };
        let suggested = parse::<T::Args>(args).ok().and_then(|parsed| self.tool.suggested_match(&parsed));
        suggested.filter(fits).unwrap_or_else(|| crate::exact_match_resolved(args, &paths))
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            match parse::<T::Args>(&args) {
                Ok(args) => self.tool.call(args, ctx).await,
                Err(refused) => Ok(ToolOutput::error(refused)),
            }
        })
    }
}

/// The arguments as `A`; the error is the message the model reads.
fn parse<A: DeserializeOwned>(args: &Value) -> Result<A, String> {
    A::deserialize(args).map_err(|e| format!("invalid arguments: {e}"))
}

// ------------------------------------------------------------------------------------------------ tool_fn

type CallFn<A> = Box<dyn Fn(A, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync>;
type CheckFn<A, T> = Box<dyn Fn(&A) -> T + Send + Sync>;
type GateFn<A> = Box<dyn Fn(&A, &ToolContext) -> Gate + Send + Sync>;

/// A tool made from a closure by [`tool_fn`], with optional checks, gate and preview, themselves closures
/// of the typed arguments.
pub struct FnTool<A> {
    name: String,
    description: String,
    schema: Value,
    call: CallFn<A>,
    validate: Option<CheckFn<A, Result<(), String>>>,
    gate: Option<GateFn<A>>,
    preview: Option<CheckFn<A, Option<String>>>,
}

/// A tool from a name, a description and an async closure of its typed arguments, allow-gated unless
/// [`FnTool::gate`] says otherwise. For checks or previews that need I/O, implement [`TypedTool`].
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use tollgate_agent_core::{Gate, IntoTool, ToolContext, ToolOutput, tool_fn};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct RefundArgs {
///     /// The order to refund.
///     order: String,
///     /// Euros.
///     amount: u32,
/// }
///
/// let refund = tool_fn("refund", "Refunds an order.", |args: RefundArgs, _ctx| async move {
///     Ok(ToolOutput::text(format!("refunded {} EUR on {}", args.amount, args.order)))
/// })
/// .gate(|args, _ctx| if args.amount > 100 { Gate::Ask } else { Gate::Allow })
/// .preview(|args| Some(format!("refund {} EUR on order {}", args.amount, args.order)))
/// .into_tool();
/// let ctx = ToolContext::new("run-1", "call-1");
/// assert_eq!(refund.gate(&serde_json::json!({"order": "A-1", "amount": 250}), &ctx), Gate::Ask);
/// assert_eq!(refund.gate(&serde_json::json!({"order": "A-1", "amount": 25}), &ctx), Gate::Allow);
/// ```
pub fn tool_fn<A, F, Fut>(name: impl Into<String>, description: impl Into<String>, call: F) -> FnTool<A>
where
    A: DeserializeOwned + JsonSchema + Send + Sync + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    FnTool {
        name: name.into(),
        description: description.into(),
        schema: args_schema::<A>(),
        call: Box::new(move |args, ctx| Box::pin(call(args, ctx))),
        validate: None,
        gate: None,
        preview: None,
    }
}

impl<A> FnTool<A> {
    /// Checks beyond the schema that make a call impossible to run; an `Err` refuses it before any gate,
    /// with the message as the model's error result.
    pub fn validate(mut self, validate: impl Fn(&A) -> Result<(), String> + Send + Sync + 'static) -> Self {
        self.validate = Some(Box::new(validate));
        self
    }

    /// The gate, decided by the arguments and the call's context (`|_, _| Gate::Ask` for all calls; see
    /// [`Tool::gate`]). With a gate set, arguments that do not deserialise (and listings, which ask about
    /// `{}`) get [`Gate::Ask`].
    pub fn gate(mut self, gate: impl Fn(&A, &ToolContext) -> Gate + Send + Sync + 'static) -> Self {
        self.gate = Some(Box::new(gate));
        self
    }

    /// What the approver sees.
    pub fn preview(mut self, preview: impl Fn(&A) -> Option<String> + Send + Sync + 'static) -> Self {
        self.preview = Some(Box::new(preview));
        self
    }
}

impl<A: DeserializeOwned + Send + Sync + 'static> Tool for FnTool<A> {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = parse::<A>(args).and_then(|args| self.validate.as_ref().map_or(Ok(()), |check| check(&args)));
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, args: &Value, ctx: &ToolContext) -> Gate {
        match (&self.gate, parse::<A>(args)) {
            (None, _) => Gate::Allow,
            (Some(gate), Ok(args)) => gate(&args, ctx),
            (Some(_), Err(_)) => Gate::Ask,
        }
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        let preview = self.preview.as_ref().and_then(|preview| preview(&parse::<A>(args).ok()?));
        Box::pin(std::future::ready(preview))
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        match parse::<A>(&args) {
            Ok(args) => (self.call)(args, ctx),
            Err(refused) => Box::pin(std::future::ready(Ok(ToolOutput::error(refused)))),
        }
    }
}

// ----------------------------------------------------------------------------------------------- IntoTool

/// Anything that can be offered to a model as a tool: a [`TypedTool`], a [`tool_fn`], or a [`Tool`]
/// already shared in an `Arc`.
pub trait IntoTool {
    /// The tool as a registry entry.
    fn into_tool(self) -> Arc<dyn Tool>;
}

impl<T: TypedTool + 'static> IntoTool for T {
    fn into_tool(self) -> Arc<dyn Tool> {
        Arc::new(Typed::new(self))
    }
}

impl<T: TypedTool + 'static> IntoTool for Typed<T> {
    fn into_tool(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }
}

impl<A: DeserializeOwned + Send + Sync + 'static> IntoTool for FnTool<A> {
    fn into_tool(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }
}

impl IntoTool for Arc<dyn Tool> {
    fn into_tool(self) -> Arc<dyn Tool> {
        self
    }
}

impl<T: Tool + 'static> IntoTool for Arc<T> {
    fn into_tool(self) -> Arc<dyn Tool> {
        self
    }
}

impl From<String> for ToolOutput {
    /// A normal result.
    fn from(content: String) -> Self {
        ToolOutput::text(content)
    }
}

impl From<&str> for ToolOutput {
    /// A normal result.
    fn from(content: &str) -> Self {
        ToolOutput::text(content)
    }
}

// ------------------------------------------------------------------------------------------------- schema

/// Number formats schemars adds from Rust's numeric types (`uint64`, `double`): noise to a model, which
/// reads `"type": "integer"` and any `minimum`/`maximum` instead. String formats (`date-time`, `uuid`) are
/// kept.
const NUMBER_FORMATS: [&str; 14] = [
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32", "uint64", "uint128",
    "float", "double",
];

/// The JSON schema of `A` as a model is offered it: no `$schema` and no `title`s, nested types inlined
/// (no `$defs`, except for a recursive type), no number `format`s, and an optional field (an `Option`)
/// neither required nor `null`able — the model leaves it out. The fields' doc comments are their
/// descriptions (the type's own is left out: the tool's description says what the model needs),
/// `#[serde(default)]` fields are not required and show their `default`, `#[serde(deny_unknown_fields)]`
/// gives `"additionalProperties": false`, and an object schema always has `properties`. `#[schemars(..)]`
/// attributes add constraints: `range(min = 1)`, `length(min = 1)`, `extend("enum" = [..])`.
pub fn args_schema<A: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.meta_schema = None;
            settings.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<A>();
    RecursiveTransform(tidy).transform(&mut schema);
    if let Some(root) = schema.as_object_mut() {
        // The type's doc comment is for Rust readers (and required of a public type); the model reads
        // the tool's description.
        root.shift_remove("description");
        if root.get("type").and_then(Value::as_str) == Some("object") {
            root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
        }
    }
    schema.to_value()
}

/// One schema (its subschemas are visited after it): the titles and number formats go, and the optional
/// properties of an object lose their `null`.
fn tidy(schema: &mut Schema) {
    let Some(object) = schema.as_object_mut() else { return };
    object.shift_remove("title");
    if object.get("format").and_then(Value::as_str).is_some_and(|format| NUMBER_FORMATS.contains(&format)) {
        object.shift_remove("format");
    }
    let required: Vec<String> = match object.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                without_null(property);
            }
        }
    }
    // `additionalProperties` after the properties, where schemas written by hand put it: a listing of the
    // tools (`tollgate tools --json`, `GET /v1/tools`) reads the same as before the tool became typed.
    if let Some(additional) = object.shift_remove("additionalProperties") {
        object.insert("additionalProperties".to_owned(), additional);
    }
}

/// The schema without the `null` that schemars adds to an `Option`: `["integer", "null"]` becomes
/// `"integer"`, `{"anyOf": [S, {"type": "null"}]}` becomes `S`, and `null` leaves an `enum` and the
/// `default` (of a `#[serde(default)]` option).
fn without_null(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else { return };
    if object.get("default").is_some_and(Value::is_null) {
        object.shift_remove("default");
    }
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".to_owned(), only);
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    let is_null = |s: &Value| s.get("type").and_then(Value::as_str) == Some("null");
    if let Some(Value::Array(any_of)) = object.get("anyOf")
        && any_of.len() == 2
        && any_of.iter().any(is_null)
    {
        let rest = any_of.iter().find(|s| !is_null(s)).cloned();
        object.shift_remove("anyOf");
        if let Some(Value::Object(rest)) = rest {
            for (key, value) in rest {
                object.entry(key).or_insert(value);
            }
        }
    }
}
