//! A panic inside the engine, in a real browser: its own test binary, since a panic traps the wasm
//! instance and leaves it unusable (std counts the thread as panicking forever after), exactly
//! why the page starts a fresh worker after one.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// A panic traps the wasm instance and unwinds past every Rust frame; the panic hook has already
/// left its message where the worker reads it, so the page can show the cause.
#[wasm_bindgen_test]
fn a_panic_leaves_its_message_for_the_worker() {
    tokenometer::api::web::start();
    assert_eq!(tokenometer::api::web::recorded_fatal(), (None, None));
    let boom = Closure::<dyn Fn()>::new(|| panic!("the test's own panic"));
    let function: &js_sys::Function = boom.as_ref().unchecked_ref();
    let trapped = function.call0(&JsValue::NULL).expect_err("a panic traps");
    assert!(
        trapped.is_instance_of::<js_sys::WebAssembly::RuntimeError>(),
        "{trapped:?}"
    );
    let (kind, message) = tokenometer::api::web::recorded_fatal();
    assert_eq!(kind.as_deref(), Some("panic"));
    let message = message.unwrap();
    assert!(
        message.starts_with("the test's own panic (at tests/web_crash.rs:"),
        "{message}"
    );
}
