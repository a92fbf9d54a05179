use super::*;
use tollgate::BuildError;

#[tokio::test]
async fn building_without_an_agent_or_a_model_names_what_is_missing() {
    let error = Tollgate::builder().store("sqlite::memory:").build().await.err();
    assert!(matches!(error, Some(BuildError::NoAgent)), "{error:?}");

    let error = Tollgate::builder().store("sqlite::memory:").agent(Agent::new("bank")).build().await.err();
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("agent `bank`") && text.contains("no model"), "{text}");
}

#[tokio::test]
async fn two_tools_with_one_name_or_an_invalid_script_are_refused_at_build() {
    let pay = Pay::default();
    let error = Tollgate::builder()
        .store("sqlite::memory:")
        .agent(Agent::new("bank").model(Model::scripted_json(THREE_CALLS)).tool(pay.clone()).tool(pay))
        .build()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("`pay` is already registered"), "{error}");

    let error = Tollgate::builder()
        .store("sqlite::memory:")
        .agent(Agent::new("bank").model(Model::scripted_json("{\"turns\": 3}")))
        .build()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.starts_with("agent `bank`: model `scripted`: invalid script: invalid type"), "{error}");
    assert_eq!(error.matches("invalid script").count(), 1, "said once: {error}");
}

#[tokio::test]
async fn an_unknown_store_scheme_is_an_error_that_hides_the_password() {
    let error = Tollgate::builder()
        .store("mysql://app:s3cret@db/x")
        .agent(Agent::new("bank").model(Model::scripted_json(THREE_CALLS)))
        .build()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("unsupported store URL scheme `mysql`"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
}

#[tokio::test]
async fn the_first_agent_is_the_default_and_others_are_named_at_start() {
    let pay = Pay::default();
    let tollgate = Tollgate::builder()
        .store("sqlite::memory:")
        .agent(Agent::new("chat").model(Model::scripted_json(r#"{"turns": [{"text": "hi"}]}"#)))
        .agent(Agent::new("bank").model(Model::scripted_json(THREE_CALLS)).tool(pay))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tollgate.agent_names(), ["chat", "bank"]);
    let run = tollgate.start("hello").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((run.agent.as_str(), run.output.as_deref()), ("chat", Some("hi")));
    let run = tollgate.start("pay").agent("bank").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status, tollgate::RunStatus::WaitingForApproval);
    let unknown = tollgate.start("x").agent("nobody").await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(unknown.contains("unknown agent `nobody`"), "{unknown}");
}
