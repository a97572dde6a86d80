use super::*;

fn ring() -> Keyring {
    Keyring::new(MasterKey::generate().unwrap())
}

#[test]
fn a_sealed_value_opens_only_for_its_own_binding() {
    let ring = ring();
    let sealed = ring.seal("svc/dkim/tenant=1/domain=2", b"private key");
    assert!(is_sealed(&sealed));
    assert_eq!(sealed_by(&sealed), Some(ring.current()));
    assert_eq!(
        ring.open("svc/dkim/tenant=1/domain=2", &sealed)
            .unwrap()
            .as_slice(),
        b"private key"
    );
    assert_eq!(
        ring.open("svc/dkim/tenant=1/domain=3", &sealed),
        Err(OpenError::Refused {
            key_id: ring.current().to_string()
        })
    );
}

#[test]
fn each_seal_draws_a_new_nonce() {
    let ring = ring();
    assert_ne!(ring.seal("b", b"same"), ring.seal("b", b"same"));
}

#[test]
fn truncated_and_altered_values_are_refused() {
    let ring = ring();
    let sealed = ring.seal("b", b"a secret of some length");
    for cut in [1, 10, sealed.len() - 30] {
        let truncated = &sealed[..sealed.len() - cut];
        assert!(matches!(
            ring.open("b", truncated),
            Err(OpenError::Refused { .. } | OpenError::Malformed)
        ));
    }
    let mut altered = sealed.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    assert!(
        ring.open("b", std::str::from_utf8(&altered).unwrap())
            .is_err()
    );
    assert_eq!(ring.open("b", "plain"), Err(OpenError::NotSealed));
    assert_eq!(ring.open("b", "enc1:nocolon"), Err(OpenError::Malformed));
}

#[test]
fn another_key_is_named_not_used() {
    let sealed = ring().seal("b", b"x");
    let other = ring();
    let id = sealed_by(&sealed).unwrap().to_string();
    assert_eq!(
        other.open("b", &sealed),
        Err(OpenError::UnknownKey { key_id: id })
    );
}

#[test]
fn a_wrapped_key_joins_the_ring_of_whoever_holds_the_wrapping_key() {
    let old = MasterKey::generate().unwrap();
    let new = MasterKey::generate().unwrap();
    let mut rotator = Keyring::new(old.clone());
    rotator.insert(new.clone());
    let wrapped = rotator.wrap(old.id(), new.id()).unwrap();
    rotator.set_current(new.id());
    let sealed = rotator.seal("b", b"v");

    let mut node = Keyring::new(old.clone());
    assert!(node.open("b", &sealed).is_err());
    node.unwrap_into(new.id(), &wrapped).unwrap();
    assert_eq!(node.open("b", &sealed).unwrap().as_slice(), b"v");
    // The wrapped copy is bound to its key id.
    let mut other = Keyring::new(old);
    assert!(other.unwrap_into("0000000000000000", &wrapped).is_err());
}

#[test]
fn key_files_are_private_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("master.key");
    let (made, created) = MasterKey::load_or_create(&path).unwrap();
    assert!(created);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (again, created) = MasterKey::load_or_create(&path).unwrap();
    assert!(!created);
    assert_eq!(made.id(), again.id());
    assert!(!format!("{made:?}").contains(&hex::encode(&made.bytes[..])));

    std::fs::write(&path, "not a key").unwrap();
    let e = MasterKey::read_file(&path).unwrap_err().to_string();
    assert!(e.contains("64 hex digits"), "{e}");
    assert!(!e.contains("not a key"), "{e}");
}
