//! Operator policy: `[[agents.policy]]` rules applied over every tool's own gate, built-in or MCP.
//!
//! The first rule whose `tool` glob matches the tool's name and whose every `when` matcher matches the
//! call's arguments decides the gate and, for a call it asks about, how many people must approve it (its
//! `approvals`, else one); with no matching rule the tool's own gate and requirement stand. A matcher
//! reads the value at its JSON pointer: a string is matched as is, a number or boolean by its JSON text; a
//! missing value never matches. Policy can make a tool stricter or looser: `forbid` beats a tool's `allow`.
//!
//! A path is judged as the tool resolves it, never as spelled: where the tool names a path argument
//! ([`Tool::policy_paths`]: every built-in file tool's `path`), the matcher on that pointer reads the
//! normalised workspace path (`./keep/x`, `x/../keep/x`, `keep//x` and `keep/x/` are all `keep/x`; an
//! absent `path` is the tool's default, `.`). And a call that acts on a whole folder (a recursive
//! `fs_delete`, an `fs_search`) matches a `forbid` or `ask` rule when the rule matches the folder or any
//! path beneath it ([`Glob::matches_within`](tollgate_agent_config::Glob::matches_within)): deleting an
//! ancestor of a forbidden path is forbidden. An `allow` rule is judged on the folder itself.
//!
//! Grants (V2.md section 1) sit after policy: the deciding rule also says whether a grant may allow the
//! call it asks about (`grantable = false` says no: the call asks every time), and a tool that any of its
//! rules marks `grantable = false` refuses to have grants made for it at all.

use serde_json::Value;
use std::sync::Arc;
use tollgate_agent_config::{PolicyGate, PolicyRule};
use tollgate_agent_core::{
    BoxFuture, Gate, PolicyPath, Preview, Requirement, Tool, ToolContext, ToolError, ToolOutput,
};

/// A tool whose gate (and, for a call it asks about, requirement) the operator's policy overrides.
pub struct PolicyTool {
    inner: Arc<dyn Tool>,
    /// The rules that name this tool, with their 1-based position in the agent's policy.
    rules: Vec<(usize, PolicyRule)>,
}

/// Wraps a tool in the rules of a policy that can apply to it; returns it unwrapped when none can.
pub fn apply(tool: Arc<dyn Tool>, policy: &[PolicyRule]) -> Arc<dyn Tool> {
    let rules: Vec<(usize, PolicyRule)> = policy
        .iter()
        .enumerate()
        .filter(|(_, rule)| rule.tool.is_match(tool.name()))
        .map(|(i, rule)| (i + 1, rule.clone()))
        .collect();
    if rules.is_empty() { tool } else { Arc::new(PolicyTool { inner: tool, rules }) }
}

/// The gate a tool has for calls with no particular arguments, and why: `default` (the tool's own gate),
/// the tool's own reason (e.g. an MCP annotation), or the policy rule that decides.
pub fn explain(tool: &dyn Tool, own_reason: &str, policy: &[PolicyRule]) -> (Gate, String) {
    let empty = Value::Object(serde_json::Map::new());
    for (i, rule) in policy.iter().enumerate() {
        if !rule.tool.is_match(tool.name()) {
            continue;
        }
        let refused = if rule.grantable { "" } else { ", not grantable" };
        if rule.when.is_empty() {
            let quorum = rule.approvals.map(|n| format!(", {n} approvals")).unwrap_or_default();
            return (
                gate_of(rule.gate),
                format!("policy rule {} (tool = \"{}\"){quorum}{refused}", i + 1, rule.tool.as_str()),
            );
        }
        let quorum = rule.approvals.map(|n| format!(" with {n} approvals")).unwrap_or_default();
        // The comma closes the aside, so that the condition reads as the rule's, not the grant's.
        let refused = if rule.grantable { "" } else { ", not grantable," };
        let own = tool.gate(&empty, &ToolContext::listing());
        let conditions: Vec<String> =
            rule.when.iter().map(|m| format!("{} = \"{}\"", m.pointer, m.pattern.as_str())).collect();
        return (
            own,
            format!(
                "{own_reason}; policy rule {} makes it {}{quorum}{refused} when {}",
                i + 1,
                rule.gate.as_str(),
                conditions.join(" and ")
            ),
        );
    }
    (tool.gate(&empty, &ToolContext::listing()), own_reason.to_owned())
}

fn gate_of(gate: PolicyGate) -> Gate {
    match gate {
        PolicyGate::Allow => Gate::Allow,
        PolicyGate::Ask => Gate::Ask,
        PolicyGate::Forbid => Gate::Forbid,
    }
}

/// Whether every matcher of `rule` matches the call: a path the tool resolved by its resolved form
/// (and, for a rule that forbids or asks, by anything beneath a folder the call acts on as a whole), any
/// other argument by its value.
fn matches(rule: &PolicyRule, args: &Value, paths: &[PolicyPath]) -> bool {
    let stricter = !matches!(rule.gate, PolicyGate::Allow);
    rule.when.iter().all(|m| {
        if let Some(path) = paths.iter().find(|p| p.pointer == m.pointer) {
            return m.pattern.is_match(&path.path)
                || (stricter && path.subtree && m.pattern.matches_within(&path.path));
        }
        match args.pointer(&m.pointer) {
            Some(Value::String(s)) => m.pattern.is_match(s),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => m.pattern.is_match(&v.to_string()),
            _ => false,
        }
    })
}

impl PolicyTool {
    /// The first rule that matches the call, which decides both its gate and its requirement.
    fn deciding_rule(&self, args: &Value) -> Option<&PolicyRule> {
        let paths = self.inner.policy_paths(args);
        self.rules.iter().map(|(_, rule)| rule).find(|rule| matches(rule, args, &paths))
    }
}

impl Tool for PolicyTool {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> &Value {
        self.inner.parameters()
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        self.inner.validate(args)
    }

    fn gate(&self, args: &Value, ctx: &ToolContext) -> Gate {
        match self.deciding_rule(args) {
            Some(rule) => gate_of(rule.gate),
            None => self.inner.gate(args, ctx),
        }
    }

    fn requirement(&self, args: &Value) -> Requirement {
        match self.deciding_rule(args) {
            Some(PolicyRule { gate: PolicyGate::Ask, approvals: Some(n), .. }) => Requirement::new(*n),
            Some(_) => Requirement::SINGLE,
            None => self.inner.requirement(args),
        }
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        self.inner.preview(args)
    }

    fn observed_preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<Preview>> {
        self.inner.observed_preview(args)
    }

    fn policy_paths(&self, args: &Value) -> Vec<PolicyPath> {
        self.inner.policy_paths(args)
    }

    fn grantable(&self, args: &Value) -> bool {
        match self.deciding_rule(args) {
            Some(PolicyRule { grantable: false, .. }) => false,
            _ => self.inner.grantable(args),
        }
    }

    fn refuses_grants(&self) -> bool {
        self.rules.iter().any(|(_, rule)| !rule.grantable) || self.inner.refuses_grants()
    }

    fn suggested_match(&self, args: &Value) -> serde_json::Map<String, Value> {
        self.inner.suggested_match(args)
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.inner.call(args, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::num::NonZeroU32;
    use tollgate_agent_config::{ArgumentMatch, Glob};
    use tollgate_agent_testkit::TestTool;

    fn rule(tool: &str, when: &[(&str, &str)], gate: PolicyGate) -> PolicyRule {
        PolicyRule {
            tool: Glob::new(tool),
            when: when.iter().map(|(p, g)| ArgumentMatch { pointer: (*p).into(), pattern: Glob::new(g) }).collect(),
            gate,
            approvals: None,
            grantable: true,
        }
    }

    /// `rule` with `grantable = false`.
    fn not_grantable(rule: PolicyRule) -> PolicyRule {
        PolicyRule { grantable: false, ..rule }
    }

    /// `rule` with `approvals = n`.
    fn quorum(rule: PolicyRule, n: u32) -> PolicyRule {
        PolicyRule { approvals: Some(NonZeroU32::new(n).unwrap_or_else(|| panic!("{n} approvals"))), ..rule }
    }

    fn approvals(tool: &dyn Tool, args: &Value) -> u32 {
        tool.requirement(args).approvals()
    }

    #[test]
    fn first_matching_rule_wins() {
        let write = TestTool::new("fs_write").gate(Gate::Ask).shared();
        let policy = vec![
            rule("fs_write", &[("/path", "notes/**")], PolicyGate::Allow),
            rule("fs_*", &[], PolicyGate::Forbid),
            rule("fs_write", &[], PolicyGate::Allow),
        ];
        let tool = apply(write, &policy);
        assert_eq!(tool.gate(&json!({"path": "notes/a/b.txt"}), &ToolContext::listing()), Gate::Allow);
        assert_eq!(
            tool.gate(&json!({"path": "secrets.txt"}), &ToolContext::listing()),
            Gate::Forbid,
            "rule 2 comes before rule 3"
        );
    }

    #[test]
    fn argument_matchers_read_json_pointers() {
        let pay = TestTool::new("pay").gate(Gate::Ask).shared();
        let policy = vec![rule("pay", &[("/amount", "?"), ("/currency", "EUR")], PolicyGate::Allow)];
        let tool = apply(pay, &policy);
        assert_eq!(
            tool.gate(&json!({"amount": 5, "currency": "EUR"}), &ToolContext::listing()),
            Gate::Allow,
            "one digit, in euros"
        );
        assert_eq!(tool.gate(&json!({"amount": 50, "currency": "EUR"}), &ToolContext::listing()), Gate::Ask);
        assert_eq!(tool.gate(&json!({"amount": 5, "currency": "USD"}), &ToolContext::listing()), Gate::Ask);
        assert_eq!(
            tool.gate(&json!({"currency": "EUR"}), &ToolContext::listing()),
            Gate::Ask,
            "a missing value never matches"
        );
    }

    #[test]
    fn forbid_beats_a_tools_allow_and_tools_without_rules_stay_unwrapped() {
        let list = TestTool::new("fs_list").shared();
        let tool = apply(list.clone(), &[rule("fs_list", &[], PolicyGate::Forbid)]);
        assert_eq!(tool.gate(&json!({}), &ToolContext::listing()), Gate::Forbid);
        let other = apply(list.clone(), &[rule("shell", &[], PolicyGate::Forbid)]);
        assert!(Arc::ptr_eq(&other, &list));
    }

    /// A built-in tool over a workspace that need not exist: judging a path reads nothing on disk.
    fn builtin(name: &str) -> Arc<dyn Tool> {
        tollgate_agent_tools::builtin_tool("/nonexistent-workspace", name).unwrap_or_else(|| panic!("no tool {name}"))
    }

    #[test]
    fn an_allow_is_judged_on_the_path_the_tool_resolves() {
        let write = apply(builtin("fs_write"), &[rule("fs_write", &[("/path", "notes/**")], PolicyGate::Allow)]);
        let gate = |path: &str| write.gate(&json!({"path": path, "content": "x"}), &ToolContext::listing());
        for path in ["notes/a.txt", "./notes/a.txt", "notes//a.txt", "x/../notes/a.txt", "notes/sub/"] {
            assert_eq!(gate(path), Gate::Allow, "{path}");
        }
        for path in ["notes/../.git/hooks/pre-commit", "notes/./../secrets.txt", "notesx/a.txt"] {
            assert_eq!(gate(path), Gate::Ask, "{path} falls to the tool's own gate");
        }
    }

    #[test]
    fn no_spelling_of_a_forbidden_path_dodges_the_forbid() {
        let policy = [rule("fs_*", &[("/path", "keep/**")], PolicyGate::Forbid)];
        let calls = [
            ("fs_write", json!({"content": "x"})),
            ("fs_search", json!({"pattern": "x"})),
            ("fs_delete", json!({})),
            ("fs_read", json!({})),
            ("fs_list", json!({})),
        ];
        for (tool, other) in calls {
            let tool = apply(builtin(tool), &policy);
            for path in ["keep/x", "./keep/x", "x/../keep/x", "keep//x", "keep/x/", "keep", "keep/", "./keep/."] {
                let mut args = other.clone();
                args["path"] = json!(path);
                assert_eq!(tool.gate(&args, &ToolContext::listing()), Gate::Forbid, "{} {path}", tool.name());
            }
        }
    }

    #[test]
    fn deleting_or_searching_a_folder_that_holds_a_forbidden_path_is_forbidden() {
        let policy = [
            rule("fs_*", &[("/path", "a/keep/**")], PolicyGate::Forbid),
            rule("fs_delete", &[("/path", "tmp/*.log")], PolicyGate::Allow),
        ];
        let delete = apply(builtin("fs_delete"), &policy);
        let gate = |path: &str| delete.gate(&json!({"path": path}), &ToolContext::listing());
        for path in ["a", "./a/", ".", "x/..", "a/keep/deeper"] {
            assert_eq!(gate(path), Gate::Forbid, "{path} holds a/keep");
        }
        for path in ["b", "a/other", "a/keeper"] {
            assert_eq!(gate(path), Gate::Ask, "{path} holds nothing forbidden");
        }
        assert_eq!(gate("tmp/x.log"), Gate::Allow);
        assert_eq!(gate("tmp"), Gate::Ask, "an allow is judged on the folder itself, not on what it holds");

        let search = apply(builtin("fs_search"), &policy);
        assert_eq!(
            search.gate(&json!({"pattern": "x"}), &ToolContext::listing()),
            Gate::Forbid,
            "the default path is the root"
        );
        assert_eq!(search.gate(&json!({"pattern": "x", "path": "a"}), &ToolContext::listing()), Gate::Forbid);
        assert_eq!(search.gate(&json!({"pattern": "x", "path": "b"}), &ToolContext::listing()), Gate::Allow);
        let list = apply(builtin("fs_list"), &policy);
        assert_eq!(
            list.gate(&json!({"path": "a"}), &ToolContext::listing()),
            Gate::Allow,
            "a listing shows only the names in `a`"
        );
    }

    #[test]
    fn the_first_matching_rule_decides_how_many_must_approve() {
        let pay = TestTool::new("pay").gate(Gate::Ask).shared();
        let policy = vec![
            rule("pay", &[("/amount", "?")], PolicyGate::Allow),
            quorum(rule("pay", &[("/currency", "EUR")], PolicyGate::Ask), 2),
            rule("pay", &[("/currency", "USD")], PolicyGate::Ask),
            quorum(rule("p*", &[], PolicyGate::Ask), 3),
        ];
        let tool = apply(pay, &policy);
        let amount = |amount: u32, currency: &str| json!({"amount": amount, "currency": currency});
        assert_eq!(approvals(tool.as_ref(), &amount(50, "EUR")), 2);
        assert_eq!(approvals(tool.as_ref(), &amount(50, "GBP")), 3, "rule 4 catches what rules 1-3 miss");
        assert_eq!(approvals(tool.as_ref(), &amount(50, "USD")), 1, "rule 3 asks once, before rule 4's quorum");
        assert_eq!(tool.gate(&amount(5, "EUR"), &ToolContext::listing()), Gate::Allow);
        assert_eq!(approvals(tool.as_ref(), &amount(5, "EUR")), 1, "rule 1 allows, before rule 2's quorum");
    }

    #[test]
    fn with_no_matching_rule_the_inner_tools_requirement_stands() {
        let pay = TestTool::new("pay").gate(Gate::Ask).shared();
        assert_eq!(approvals(apply(pay.clone(), &[rule("pay", &[], PolicyGate::Ask)]).as_ref(), &json!({})), 1);
        // An inner tool that asks for a quorum of its own: here, a policy-wrapped one.
        let inner = apply(pay, &[quorum(rule("pay", &[], PolicyGate::Ask), 3)]);
        let outer = apply(inner, &[quorum(rule("pay", &[("/currency", "EUR")], PolicyGate::Ask), 2)]);
        assert_eq!(approvals(outer.as_ref(), &json!({"currency": "EUR"})), 2);
        assert_eq!(approvals(outer.as_ref(), &json!({"currency": "USD"})), 3);
        assert_eq!(outer.gate(&json!({"currency": "USD"}), &ToolContext::listing()), Gate::Ask);
    }

    #[test]
    fn a_quorum_is_judged_on_the_path_the_tool_resolves() {
        let policy = [
            quorum(rule("fs_delete", &[("/path", "data/**")], PolicyGate::Ask), 2),
            rule("fs_delete", &[("/path", "tmp/**")], PolicyGate::Allow),
        ];
        let delete = apply(builtin("fs_delete"), &policy);
        let approvals = |path: &str| approvals(delete.as_ref(), &json!({"path": path}));
        for path in ["data/x", "./data/x", "x/../data/x", "data//x", "data", ".", "x/.."] {
            assert_eq!(approvals(path), 2, "{path} is or holds data/");
        }
        for path in ["datax", "tmp/data/x", "notes", "data/../notes"] {
            assert_eq!(approvals(path), 1, "{path}");
        }
    }

    #[test]
    fn explain_names_the_deciding_rule() {
        let write = TestTool::new("fs_write").gate(Gate::Ask);
        let policy =
            vec![rule("fs_write", &[("/path", "notes/**")], PolicyGate::Allow), rule("*", &[], PolicyGate::Forbid)];
        let (gate, why) = explain(&write, "default", &policy);
        assert_eq!(gate, Gate::Ask);
        assert_eq!(why, "default; policy rule 1 makes it allow when /path = \"notes/**\"");
        let list = TestTool::new("fs_list");
        assert_eq!(explain(&list, "default", &policy), (Gate::Forbid, "policy rule 2 (tool = \"*\")".into()));
        assert_eq!(explain(&list, "default", &[]), (Gate::Allow, "default".into()));
    }

    #[test]
    fn explain_names_a_quorum() {
        let pay = TestTool::new("pay").gate(Gate::Ask);
        let policy = vec![rule("shell", &[], PolicyGate::Forbid), quorum(rule("pay", &[], PolicyGate::Ask), 2)];
        assert_eq!(
            explain(&pay, "default", &policy),
            (Gate::Ask, "policy rule 2 (tool = \"pay\"), 2 approvals".into())
        );
        let policy = vec![quorum(rule("pay", &[("/currency", "EUR")], PolicyGate::Ask), 3)];
        assert_eq!(
            explain(&pay, "default", &policy),
            (Gate::Ask, "default; policy rule 1 makes it ask with 3 approvals when /currency = \"EUR\"".into())
        );
    }

    #[test]
    fn the_deciding_rule_says_whether_a_grant_may_allow_the_call() {
        let pay = TestTool::new("pay").gate(Gate::Ask).shared();
        let policy = vec![
            rule("pay", &[("/amount", "?")], PolicyGate::Allow),
            not_grantable(rule("pay", &[("/currency", "EUR")], PolicyGate::Ask)),
            rule("pay", &[("/currency", "USD")], PolicyGate::Ask),
        ];
        let tool = apply(pay.clone(), &policy);
        let amount = |amount: u32, currency: &str| json!({"amount": amount, "currency": currency});
        assert!(!tool.grantable(&amount(50, "EUR")), "rule 2 decides, and refuses grants");
        assert!(tool.grantable(&amount(50, "USD")), "rule 3 decides, and leaves it to the tool");
        assert!(tool.grantable(&amount(5, "EUR")), "rule 1 decides (before rule 2)");
        assert!(tool.grantable(&amount(50, "GBP")), "no rule decides: the tool's own say");

        // Where the deciding rule leaves it to the tool, a tool that refuses (here, a policy-wrapped one) refuses.
        let inner = apply(pay, &[not_grantable(rule("pay", &[], PolicyGate::Ask))]);
        let outer = apply(inner, &[rule("pay", &[("/currency", "EUR")], PolicyGate::Ask)]);
        assert!(!outer.grantable(&amount(50, "EUR")));
        assert!(!outer.grantable(&amount(50, "USD")));
    }

    #[test]
    fn a_tool_refuses_grants_when_any_rule_naming_it_does() {
        let policy = vec![
            rule("pay", &[("/amount", "?")], PolicyGate::Allow),
            not_grantable(rule("p*", &[("/currency", "EUR")], PolicyGate::Ask)),
        ];
        let pay = apply(TestTool::new("pay").gate(Gate::Ask).shared(), &policy);
        assert!(pay.refuses_grants(), "rule 2 names pay, whatever it matches");
        let refund = apply(TestTool::new("refund").gate(Gate::Ask).shared(), &policy);
        assert!(!refund.refuses_grants(), "no rule names refund");
        let grantable = apply(TestTool::new("pay").gate(Gate::Ask).shared(), &[rule("pay", &[], PolicyGate::Ask)]);
        assert!(!grantable.refuses_grants());
        let outer = apply(pay, &[rule("pay", &[], PolicyGate::Ask)]);
        assert!(outer.refuses_grants(), "the inner tool refuses");
    }

    #[test]
    fn the_suggested_match_is_the_inner_tools() {
        let write = apply(builtin("fs_write"), &[not_grantable(rule("fs_write", &[], PolicyGate::Ask))]);
        let args = json!({"path": "notes/../notes/a.md", "content": "x"});
        assert_eq!(Value::Object(write.suggested_match(&args)), json!({"/path": "notes/*"}));
        let pay = apply(TestTool::new("pay").gate(Gate::Ask).shared(), &[rule("pay", &[], PolicyGate::Ask)]);
        assert_eq!(Value::Object(pay.suggested_match(&json!({"to": "bob"}))), json!({"/to": "bob"}));
    }

    #[test]
    fn explain_says_a_rule_is_not_grantable() {
        let pay = TestTool::new("pay").gate(Gate::Ask);
        let policy = vec![not_grantable(quorum(rule("pay", &[], PolicyGate::Ask), 2))];
        assert_eq!(
            explain(&pay, "default", &policy),
            (Gate::Ask, "policy rule 1 (tool = \"pay\"), 2 approvals, not grantable".into())
        );
        let policy = vec![not_grantable(rule("pay", &[], PolicyGate::Ask))];
        assert_eq!(explain(&pay, "default", &policy).1, "policy rule 1 (tool = \"pay\"), not grantable");
        let policy = vec![not_grantable(rule("pay", &[("/currency", "EUR")], PolicyGate::Ask))];
        assert_eq!(
            explain(&pay, "default", &policy),
            (Gate::Ask, "default; policy rule 1 makes it ask, not grantable, when /currency = \"EUR\"".into())
        );
        let policy = vec![not_grantable(quorum(rule("pay", &[("/currency", "EUR")], PolicyGate::Ask), 3))];
        assert_eq!(
            explain(&pay, "default", &policy).1,
            "default; policy rule 1 makes it ask with 3 approvals, not grantable, when /currency = \"EUR\""
        );
    }
}
