//! Operator policy: `[[agents.policy]]` rules applied over every tool's own gate, built-in or MCP.
//!
//! The first rule whose `tool` glob matches the tool's name and whose every `when` matcher matches the
//! call's arguments decides the gate; with no matching rule the tool's own gate stands. A matcher reads the
//! value at its JSON pointer: a string is matched as is, a number or boolean by its JSON text; a missing
//! value never matches. Policy can make a tool stricter or looser: `forbid` beats a tool's `allow`.

use serde_json::Value;
use std::sync::Arc;
use tollgate_agent_config::{PolicyGate, PolicyRule};
use tollgate_agent_core::{BoxFuture, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// A tool whose gate the operator's policy overrides.
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
        if rule.when.is_empty() {
            return (gate_of(rule.gate), format!("policy rule {} (tool = \"{}\")", i + 1, rule.tool.as_str()));
        }
        let own = tool.gate(&empty);
        let conditions: Vec<String> =
            rule.when.iter().map(|m| format!("{} = \"{}\"", m.pointer, m.pattern.as_str())).collect();
        return (
            own,
            format!(
                "{own_reason}; policy rule {} makes it {} when {}",
                i + 1,
                rule.gate.as_str(),
                conditions.join(" and ")
            ),
        );
    }
    (tool.gate(&empty), own_reason.to_owned())
}

fn gate_of(gate: PolicyGate) -> Gate {
    match gate {
        PolicyGate::Allow => Gate::Allow,
        PolicyGate::Ask => Gate::Ask,
        PolicyGate::Forbid => Gate::Forbid,
    }
}

fn matches(rule: &PolicyRule, args: &Value) -> bool {
    rule.when.iter().all(|m| match args.pointer(&m.pointer) {
        Some(Value::String(s)) => m.pattern.is_match(s),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => m.pattern.is_match(&v.to_string()),
        _ => false,
    })
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

    fn gate(&self, args: &Value) -> Gate {
        match self.rules.iter().find(|(_, rule)| matches(rule, args)) {
            Some((_, rule)) => gate_of(rule.gate),
            None => self.inner.gate(args),
        }
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        self.inner.preview(args)
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.inner.call(args, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tollgate_agent_config::{ArgumentMatch, Glob};
    use tollgate_agent_testkit::TestTool;

    fn rule(tool: &str, when: &[(&str, &str)], gate: PolicyGate) -> PolicyRule {
        PolicyRule {
            tool: Glob::new(tool),
            when: when.iter().map(|(p, g)| ArgumentMatch { pointer: (*p).into(), pattern: Glob::new(g) }).collect(),
            gate,
        }
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
        assert_eq!(tool.gate(&json!({"path": "notes/a/b.txt"})), Gate::Allow);
        assert_eq!(tool.gate(&json!({"path": "secrets.txt"})), Gate::Forbid, "rule 2 comes before rule 3");
    }

    #[test]
    fn argument_matchers_read_json_pointers() {
        let pay = TestTool::new("pay").gate(Gate::Ask).shared();
        let policy = vec![rule("pay", &[("/amount", "?"), ("/currency", "EUR")], PolicyGate::Allow)];
        let tool = apply(pay, &policy);
        assert_eq!(tool.gate(&json!({"amount": 5, "currency": "EUR"})), Gate::Allow, "one digit, in euros");
        assert_eq!(tool.gate(&json!({"amount": 50, "currency": "EUR"})), Gate::Ask);
        assert_eq!(tool.gate(&json!({"amount": 5, "currency": "USD"})), Gate::Ask);
        assert_eq!(tool.gate(&json!({"currency": "EUR"})), Gate::Ask, "a missing value never matches");
    }

    #[test]
    fn forbid_beats_a_tools_allow_and_tools_without_rules_stay_unwrapped() {
        let list = TestTool::new("fs_list").shared();
        let tool = apply(list.clone(), &[rule("fs_list", &[], PolicyGate::Forbid)]);
        assert_eq!(tool.gate(&json!({})), Gate::Forbid);
        let other = apply(list.clone(), &[rule("shell", &[], PolicyGate::Forbid)]);
        assert!(Arc::ptr_eq(&other, &list));
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
}
