//! What a component imports and exports, and whether that fits its manifest.
//!
//! An extension may import the host interfaces of [`crate::WIT_PACKAGE`] that
//! its manifest's capabilities cover, plus the WASI preview 2 interfaces the
//! preview1 reactor adapter needs (a component built without the adapter,
//! like the analytics plugin, imports fewer). Sockets, `wasi:http` and
//! anything else are refused at install time, before the component ever runs.

use crate::Manifest;

/// The WASI interfaces (version `0.2.*`) an extension may import: the ones
/// the preview1 adapter needs. The host provides them with no preopens, no
/// environment and no network.
pub const ALLOWED_WASI_INTERFACES: [&str; 17] = [
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stderr",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stderr",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
];

/// Host interfaces of the WIT package and the capability each needs
/// (`None`: always available).
const HOST_INTERFACES: [(&str, Option<HostCapability>); 4] = [
    ("context", None),
    ("log", None),
    ("http-binding", Some(HostCapability::Http)),
    ("documents", Some(HostCapability::Documents)),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostCapability {
    Http,
    Documents,
}

/// The interface an extension must export.
pub const EXPORT_INTERFACE: &str = "extension";

/// The custom section in which a component built with `extension-guest`
/// lists the actions its code dispatches, each name followed by a newline
/// (the guest crate's `actions!` writes it).
pub const ACTIONS_SECTION: &str = "platform-actions";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    /// Top-level import names, e.g. `platform:extension/documents@0.1.0`.
    pub imports: Vec<String>,
    /// Top-level export names.
    pub exports: Vec<String>,
    /// The actions the component's code dispatches ([`ACTIONS_SECTION`]);
    /// `None` for a component that does not say (not built with
    /// `extension-guest`'s `actions!`).
    pub dispatched: Option<Vec<String>>,
}

impl ComponentInfo {
    /// The WIT package version of the exported extension interface.
    pub fn wit_version(&self) -> Option<&str> {
        let prefix = format!("{}/{EXPORT_INTERFACE}@", crate::WIT_PACKAGE);
        self.exports.iter().find_map(|e| e.strip_prefix(&prefix))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    #[error("the component is not valid WebAssembly: {0}")]
    Invalid(String),
    #[error("the file is a core WebAssembly module, not a component")]
    NotAComponent,
    #[error(
        "the component does not export `{}/{EXPORT_INTERFACE}`",
        crate::WIT_PACKAGE
    )]
    MissingExport,
    #[error(
        "the component is built for WIT package {package}@{found}; this host supports {package}@{}",
        supported.join(", @")
    )]
    UnsupportedWit {
        package: &'static str,
        found: String,
        supported: Vec<String>,
    },
    #[error("the manifest declares WIT {manifest} but the component exports {component}")]
    WitMismatch { manifest: String, component: String },
    #[error("the component imports `{import}`, which {reason}")]
    UndeclaredImport { import: String, reason: String },
    #[error(
        "manifest.toml declares the action `{action}`, but the component's code does not \
         implement it (it implements {dispatched}): add its handler to `impl manifest::Actions` \
         (or to `actions!`) and build the component again, or remove the action from manifest.toml"
    )]
    UnimplementedAction { action: String, dispatched: String },
    #[error(
        "the component implements the action `{action}`, which manifest.toml does not declare: \
         add an [[actions]] entry for it (docs/manifest.md), or remove its handler"
    )]
    UndeclaredAction { action: String },
    #[error("the component's {ACTIONS_SECTION} section is not UTF-8 action names, one per line")]
    ActionsSection,
}

/// Validates `bytes` as a component and lists its top-level imports and exports.
pub fn inspect(bytes: &[u8]) -> Result<ComponentInfo, ComponentError> {
    if !wasmparser::Parser::is_component(bytes) {
        return if wasmparser::Parser::is_core_wasm(bytes) {
            Err(ComponentError::NotAComponent)
        } else {
            Err(ComponentError::Invalid(
                "it does not start with the WebAssembly header".to_owned(),
            ))
        };
    }
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(bytes)
        .map_err(|e| ComponentError::Invalid(e.to_string()))?;

    let mut info = ComponentInfo {
        imports: Vec::new(),
        exports: Vec::new(),
        dispatched: None,
    };
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| ComponentError::Invalid(e.to_string()))?;
        match payload {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.map_err(|e| ComponentError::Invalid(e.to_string()))?;
                    info.imports.push(import.name.name.to_owned());
                }
            }
            wasmparser::Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.map_err(|e| ComponentError::Invalid(e.to_string()))?;
                    info.exports.push(export.name.name.to_owned());
                }
            }
            // In the core module, wherever it is nested.
            wasmparser::Payload::CustomSection(section) if section.name() == ACTIONS_SECTION => {
                let names = std::str::from_utf8(section.data())
                    .map_err(|_| ComponentError::ActionsSection)?;
                let dispatched = info.dispatched.get_or_insert_with(Vec::new);
                for name in names.split_terminator('\n') {
                    if name.is_empty() {
                        return Err(ComponentError::ActionsSection);
                    }
                    dispatched.push(name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(info)
}

/// The manifest's actions against the ones the component says it
/// dispatches, in both directions (nothing to check when it does not say).
fn check_actions(manifest: &Manifest, info: &ComponentInfo) -> Result<(), ComponentError> {
    let Some(dispatched) = &info.dispatched else {
        return Ok(());
    };
    let declared = || manifest.actions.iter().map(|a| a.name.as_str());
    if let Some(action) = declared().find(|name| !dispatched.iter().any(|d| d == name)) {
        let dispatched = if dispatched.is_empty() {
            "none".to_owned()
        } else {
            dispatched.join(", ")
        };
        return Err(ComponentError::UnimplementedAction {
            action: action.to_owned(),
            dispatched,
        });
    }
    if let Some(action) = dispatched
        .iter()
        .find(|d| !declared().any(|name| name == *d))
    {
        return Err(ComponentError::UndeclaredAction {
            action: action.clone(),
        });
    }
    Ok(())
}

/// Checks a component against its manifest and the WIT versions a host
/// supports: the exported WIT version, then every import.
pub fn check_against_manifest(
    manifest: &Manifest,
    info: &ComponentInfo,
    supported: &[&str],
) -> Result<(), ComponentError> {
    let found = info.wit_version().ok_or(ComponentError::MissingExport)?;
    if !supported.contains(&found) {
        return Err(ComponentError::UnsupportedWit {
            package: crate::WIT_PACKAGE,
            found: found.to_owned(),
            supported: supported.iter().map(|s| s.to_string()).collect(),
        });
    }
    if manifest.wit_version() != Some(found) {
        return Err(ComponentError::WitMismatch {
            manifest: manifest.extension.wit.clone(),
            component: format!("{}@{found}", crate::WIT_PACKAGE),
        });
    }
    for import in &info.imports {
        check_import(manifest, import, found)?;
    }
    check_actions(manifest, info)?;
    Ok(())
}

fn check_import(
    manifest: &Manifest,
    import: &str,
    wit_version: &str,
) -> Result<(), ComponentError> {
    let refuse = |reason: String| ComponentError::UndeclaredImport {
        import: import.to_owned(),
        reason,
    };
    let (interface, version) = import
        .split_once('@')
        .ok_or_else(|| refuse("is not a versioned WIT interface".to_owned()))?;
    if let Some(name) = interface
        .strip_prefix(crate::WIT_PACKAGE)
        .and_then(|rest| rest.strip_prefix('/'))
    {
        if version != wit_version {
            return Err(refuse(format!(
                "is a different version of the host package than the exported {wit_version}"
            )));
        }
        let needs = HOST_INTERFACES
            .iter()
            .find(|(known, _)| *known == name)
            .ok_or_else(|| refuse("is not an interface of the host package".to_owned()))?
            .1;
        let declared = match needs {
            None => true,
            Some(HostCapability::Http) => !manifest.capabilities.http.is_empty(),
            Some(HostCapability::Documents) => manifest.capabilities.documents.is_some(),
        };
        return if declared {
            Ok(())
        } else {
            Err(refuse(
                "needs a capability the manifest does not declare".to_owned(),
            ))
        };
    }
    if ALLOWED_WASI_INTERFACES.contains(&interface) && version.starts_with("0.2.") {
        return Ok(());
    }
    Err(refuse(
        "is neither a host interface nor a WASI interface extensions may use".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest::from_toml(include_str!("../../../manifest.toml")).unwrap()
    }

    fn info(imports: &[&str], version: &str) -> ComponentInfo {
        ComponentInfo {
            imports: imports.iter().map(|s| s.to_string()).collect(),
            exports: vec![format!("platform:extension/extension@{version}")],
            dispatched: None,
        }
    }

    #[test]
    fn declared_imports_pass() {
        let i = info(
            &[
                "wasi:io/streams@0.2.6",
                "platform:extension/context@0.1.0",
                "platform:extension/http-binding@0.1.0",
                "platform:extension/documents@0.1.0",
            ],
            "0.1.0",
        );
        check_against_manifest(&manifest(), &i, &["0.1.0"]).unwrap();
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let m = manifest();
        let err = check_against_manifest(&m, &info(&[], "0.2.0"), &["0.1.0"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the component is built for WIT package platform:extension@0.2.0; this host supports platform:extension@0.1.0"
        );
        for bad in [
            "wasi:sockets/tcp@0.2.6",
            "wasi:http/outgoing-handler@0.2.6",
            "platform:extension/secrets@0.1.0",
            "platform:extension/documents@0.2.0",
            "wasi:io/streams@0.3.0",
            "env",
        ] {
            let err = check_against_manifest(&m, &info(&[bad], "0.1.0"), &["0.1.0"]).unwrap_err();
            assert!(
                matches!(&err, ComponentError::UndeclaredImport { import, .. } if import == bad),
                "{bad}: {err}"
            );
        }
        let mut no_docs = m.clone();
        no_docs.capabilities.documents = None;
        let err = check_against_manifest(
            &no_docs,
            &info(&["platform:extension/documents@0.1.0"], "0.1.0"),
            &["0.1.0"],
        )
        .unwrap_err();
        assert!(err.to_string().contains("capability"), "{err}");
        assert_eq!(
            check_against_manifest(
                &m,
                &ComponentInfo {
                    imports: vec![],
                    exports: vec![],
                    dispatched: None,
                },
                &["0.1.0"]
            ),
            Err(ComponentError::MissingExport)
        );
    }

    #[test]
    fn the_dispatched_actions_must_be_the_manifest_s() {
        let m = manifest();
        let with = |names: &[&str]| ComponentInfo {
            dispatched: Some(names.iter().map(|s| s.to_string()).collect()),
            ..info(&[], "0.1.0")
        };
        let all = [
            "analytics.provision",
            "analytics.configuration",
            "analytics.stats",
        ];
        check_against_manifest(&m, &with(&all), &["0.1.0"]).unwrap();
        let err = check_against_manifest(&m, &with(&all[..2]), &["0.1.0"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "manifest.toml declares the action `analytics.stats`, but the component's code does not \
             implement it (it implements analytics.provision, analytics.configuration): add its \
             handler to `impl manifest::Actions` (or to `actions!`) and build the component \
             again, or remove the action from manifest.toml"
        );
        let err = check_against_manifest(
            &m,
            &with(&[&all[..], &["analytics.export"][..]].concat()),
            &["0.1.0"],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the component implements the action `analytics.export`, which manifest.toml does not \
             declare: add an [[actions]] entry for it (docs/manifest.md), or remove its handler"
        );
    }

    #[test]
    fn core_modules_and_garbage_are_not_components() {
        assert_eq!(
            inspect(b"\0asm\x01\0\0\0"),
            Err(ComponentError::NotAComponent)
        );
        assert!(matches!(inspect(b"hello"), Err(ComponentError::Invalid(_))));
    }
}
