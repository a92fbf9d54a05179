//! The example runs as its README says, offline, and denies the large transfer only.

#[test]
fn the_small_transfer_is_allowed_and_the_large_one_waits_and_is_denied() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_example-gated-tool"))
        .output()
        .unwrap_or_else(|e| panic!("could not run the example: {e}"));
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(out.contains("is waiting_for_approval"), "{out}");
    assert!(out.contains(r#"call_1 {"to":"alice","cents":2500} gate=allow preview=Some("Pay alice 25.00")"#), "{out}");
    assert!(out.contains(r#"call_2 {"to":"bob","cents":250000} gate=ask preview=Some("Pay bob 2500.00")"#), "{out}");
    assert!(out.contains("is completed: Alice was paid; Bob's transfer was declined."), "{out}");
    assert!(out.contains("events verified"), "{out}");
}
