//! An operator installs only verified releases: signed by a trusted
//! publisher key, every digest right, a valid component built for a
//! supported WIT version and importing nothing beyond its declared
//! capabilities. A refused release leaves nothing installed.

mod common;

use common::*;
use extension_release::PublisherKey;
use host_sim::{HostError, InstallError, InvokeError};
use serde_json::json;

const HOST_WIT: &str = include_str!("../../wit/extension-host.wit");

/// A component for `world` of `wit` whose core module does nothing.
fn crafted_component(deps: &[&str], wit: &str, world: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    for (i, dep) in deps.iter().enumerate() {
        resolve.push_str(format!("dep{i}.wit"), dep).unwrap();
    }
    let package = resolve.push_str("host.wit", wit).unwrap();
    let world = resolve.select_world(&[package], Some(world)).unwrap();
    let mut module =
        wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

fn assert_nothing_installed(env: &TestEnv) {
    assert!(env.host.releases().unwrap().is_empty());
    assert!(env.host.state().release(EXTENSION).unwrap().is_none());
}

fn install_error(env: &TestEnv, dir: &std::path::Path) -> InstallError {
    env.host.install_release(dir, &mut |_| {}).unwrap_err()
}

#[test]
fn a_verified_release_is_installed_listed_and_reported_step_by_step() {
    let env = TestEnv::new();
    let dir = env.release(MANIFEST, guest_component());
    let mut steps = Vec::new();
    let summary = env
        .host
        .install_release(&dir, &mut |s| steps.push(s.to_string()))
        .unwrap();
    assert_eq!(summary.extension_id, EXTENSION);
    assert_eq!(summary.capabilities, vec!["documents", "http:provider"]);
    assert!(steps.iter().any(|s| s.contains("signature")), "{steps:?}");
    assert!(steps.iter().any(|s| s.contains("compiling")), "{steps:?}");
    let listed = env.host.releases().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].digest, summary.digest);
    assert!(
        listed[0].approved.is_empty(),
        "nothing is approved at install"
    );
    // Installing again is a conflict; upgrading something absent is not found.
    assert!(matches!(
        install_error(&env, &dir),
        InstallError::State(host_sim::state::StateError::AlreadyInstalled { .. })
    ));
}

#[test]
fn a_tampered_release_is_refused() {
    let env = TestEnv::new();
    // A changed component byte.
    let dir = env.release(MANIFEST, guest_component());
    let wasm = dir.join("extension.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&wasm, bytes).unwrap();
    let error = install_error(&env, &dir);
    assert!(
        matches!(
            error,
            InstallError::Verify(extension_release::VerifyError::DigestMismatch { .. })
        ),
        "{error}"
    );
    assert!(error.to_string().contains("extension.wasm"), "{error}");
    assert_nothing_installed(&env);

    // A changed manifest.
    let dir = env.release(MANIFEST, guest_component());
    let manifest = dir.join("manifest.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("version = \"0.1.0\"", "version = \"9.9.9\""),
    )
    .unwrap();
    let error = install_error(&env, &dir);
    assert!(
        matches!(
            error,
            InstallError::Verify(extension_release::VerifyError::BadSignature { .. })
        ),
        "{error}"
    );
    assert_nothing_installed(&env);

    // A file the manifest does not list.
    let dir = env.release(MANIFEST, guest_component());
    std::fs::write(dir.join("extra.js"), "alert(1)").unwrap();
    let error = install_error(&env, &dir);
    assert!(
        matches!(
            error,
            InstallError::Verify(extension_release::VerifyError::UnlistedFile(_))
        ),
        "{error}"
    );
    assert_nothing_installed(&env);
}

#[test]
fn a_release_signed_by_an_untrusted_key_is_refused() {
    let env = TestEnv::new();
    let stranger = PublisherKey::generate();
    let dir = env.release_signed_by(&stranger, MANIFEST, guest_component());
    let error = install_error(&env, &dir);
    assert!(
        matches!(&error, InstallError::UntrustedKey { key_id, .. } if *key_id == stranger.public().key_id()),
        "{error}"
    );
    // The refusal says where a trusted key goes.
    let trust_dir = env.host.trust_dir().display().to_string();
    assert!(
        error.to_string().contains(&format!(
            "which this host does not trust; to trust it, put the publisher's public key file \
             (the `.pub` that `host-sim publisher keygen` wrote beside the key) into {trust_dir} \
             (the trusted-publishers directory; `--trust-dir` or HOST_SIM_TRUST_DIR names another)"
        )),
        "{error}"
    );
    assert!(env.host.verify_release(&dir, &mut |_| {}).is_err());
    assert_nothing_installed(&env);
}

#[test]
fn a_component_for_an_unsupported_wit_version_is_refused_naming_both_versions() {
    let env = TestEnv::new();
    let future_wit = HOST_WIT.replace("@0.1.0", "@0.2.0");
    let component = crafted_component(&[], &future_wit, "managed-extension");
    let manifest = MANIFEST.replace("platform:extension@0.1.0", "platform:extension@0.2.0");
    let dir = env.release(&manifest, component);
    let error = install_error(&env, &dir);
    assert!(
        matches!(
            error,
            InstallError::Component(
                extension_release::component::ComponentError::UnsupportedWit { .. }
            )
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("0.2.0") && message.contains("0.1.0"),
        "{message}"
    );
    assert_nothing_installed(&env);
}

#[test]
fn an_import_beyond_the_declared_capabilities_is_refused() {
    let env = TestEnv::new();
    // A socket import, which no manifest can declare.
    let sockets = "package wasi:sockets@0.2.0;\ninterface tcp { connect: func(port: u16); }\n";
    let sneaky_wit = format!(
        "{HOST_WIT}\nworld sneaky {{\n  include managed-extension;\n  import wasi:sockets/tcp@0.2.0;\n}}\n"
    );
    let component = crafted_component(&[sockets], &sneaky_wit, "sneaky");
    let dir = env.release(MANIFEST, component);
    let error = install_error(&env, &dir);
    assert!(
        matches!(
            error,
            InstallError::Component(
                extension_release::component::ComponentError::UndeclaredImport { .. }
            )
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("wasi:sockets/tcp@0.2.0"),
        "{error}"
    );
    assert_nothing_installed(&env);

    // The real guest imports documents; a manifest without that capability is refused.
    let without_documents = r#"
[extension]
id = "test-extension"
name = "Host-sim test extension"
version = "0.1.0"
wit = "platform:extension@0.1.0"
component = "extension.wasm"

[capabilities.http.provider]
description = "The test provider."
allow = [{ method = "GET", path = "/api/items/{id}" }]

[[actions]]
name = "context"
description = "Answers the invocation context."
http = { method = "GET", route = "/context" }
mcp_tool = "plugin__test_extension__context"
capabilities = []
input_schema = { type = "object" }
output_schema = { type = "object" }
"#;
    let dir = env.release(without_documents, guest_component());
    let error = install_error(&env, &dir);
    assert!(
        error
            .to_string()
            .contains("platform:extension/documents@0.1.0"),
        "{error}"
    );
    assert_nothing_installed(&env);
}

#[test]
fn bytes_that_are_not_a_component_are_refused() {
    let env = TestEnv::new();
    let dir = env.release(MANIFEST, b"\0asm\x01\0\0\0".to_vec());
    let error = install_error(&env, &dir);
    assert!(matches!(error, InstallError::Component(_)), "{error}");
    assert_nothing_installed(&env);
}

#[test]
fn upgrade_needs_a_new_approval_and_uninstall_removes_grants() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    assert_eq!(
        code(&env.invoke(
            &token,
            "p1",
            "docs.write",
            json!({ "id": "one", "body": 1 })
        )),
        "ok"
    );
    let missing = env.release(MANIFEST, guest_component());
    let before = env.host.generation(EXTENSION, "p1").unwrap();

    let manifest = MANIFEST.replace("version = \"0.1.0\"", "version = \"0.2.0\"");
    let dir = env.release(&manifest, guest_component());
    let upgraded = env.host.upgrade_release(&dir, &mut |_| {}).unwrap();
    assert_eq!(upgraded.version, "0.2.0");
    assert!(env.host.generation(EXTENSION, "p1").unwrap() > before);
    let unapproved = env.invoke(&token, "p1", "docs.read_one", json!({}));
    assert!(matches!(
        unapproved.result,
        Err(InvokeError::CapabilityNotApproved { .. })
    ));
    env.host.approve(EXTENSION, &[]).unwrap();
    let read = env.invoke(&token, "p1", "docs.read_one", json!({}));
    assert_eq!(
        read.result.unwrap()["document"]["body"],
        1,
        "documents survive an upgrade"
    );

    env.host.uninstall(EXTENSION).unwrap();
    assert!(env.host.releases().unwrap().is_empty());
    let gone = env.invoke(&token, "p1", "docs.read_one", json!({}));
    assert!(matches!(gone.result, Err(InvokeError::NotGranted { .. })));
    assert!(matches!(
        env.host.grant(EXTENSION, "p1"),
        Err(HostError::State(
            host_sim::state::StateError::NotInstalled { .. }
        ))
    ));
    // Upgrading an extension that is not installed is refused.
    assert!(env.host.upgrade_release(&missing, &mut |_| {}).is_err());
    assert!(env.host.releases().unwrap().is_empty());
}

#[test]
fn only_declared_capabilities_can_be_approved() {
    let env = TestEnv::new();
    let dir = env.release(MANIFEST, guest_component());
    env.host.install_release(&dir, &mut |_| {}).unwrap();
    let error = env
        .host
        .approve(EXTENSION, &["http:admin".into()])
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("does not declare capability http:admin"),
        "{error}"
    );
    assert!(env.host.approvals(EXTENSION).unwrap().is_empty());
}
