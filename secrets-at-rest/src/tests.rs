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

fn listed(keys: &[&MasterKey]) -> Vec<StoredKey> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| StoredKey {
            id: k.id().to_string(),
            seq: i as i64 + 1,
            created_at: 0,
        })
        .collect()
}

#[test]
fn a_database_takes_its_first_key_and_its_own_keys_only() {
    let (one, two) = (
        MasterKey::generate().unwrap(),
        MasterKey::generate().unwrap(),
    );
    assert_eq!(adopt(&[], one.id(), "f"), Ok(Adoption::First));
    assert_eq!(adopt(&listed(&[&one]), one.id(), "f"), Ok(Adoption::Known));
    let refused = adopt(&listed(&[&one]), two.id(), "/keys/two")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!("the master key /keys/two (id {})", two.id()))
            && refused.contains(one.id())
            && refused.contains("nothing was changed")
            && refused.contains("--master-key-file")
            && refused.contains("restored from a backup needs the master key it was written with"),
        "{refused}"
    );
}

#[test]
fn beside_a_database_with_keys_no_key_file_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(DEFAULT_KEY_FILE);
    let known = vec!["0123456789abcdef".to_string()];
    let e = MasterKeySource::BesideData
        .load_for(dir.path(), &known, "restored/mail.db")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("restored/mail.db holds secrets sealed under master key 0123456789abcdef")
            && e.contains(&file.display().to_string())
            && e.contains("needs the master key it was written with")
            && e.contains("nothing was changed"),
        "{e}"
    );
    assert!(!file.exists(), "no key was made");
    // A new database (no keys yet) gets its key made, as before.
    let loaded = MasterKeySource::BesideData
        .load_for(dir.path(), &[], "new.db")
        .unwrap();
    assert!(loaded.created.is_some() && file.exists());
}

#[test]
fn a_rotation_starts_once_resumes_and_refuses_a_key_it_cannot_use() {
    let (old, new) = (
        MasterKey::generate().unwrap(),
        MasterKey::generate().unwrap(),
    );
    let mut ring = Keyring::new(old.clone());
    let sealed = ring.seal("b", b"v");
    let started = ring.begin_rotation(&listed(&[&old]), new.clone()).unwrap();
    assert_eq!(
        (started.new_id.as_str(), started.previous.as_str()),
        (new.id(), old.id())
    );
    let [down, up] = started.record.expect("a new rotation records its key");
    assert_eq!(
        (down.key_id.as_str(), down.wrapping_key_id.as_str()),
        (new.id(), old.id())
    );
    assert_eq!(
        (up.key_id.as_str(), up.wrapping_key_id.as_str()),
        (old.id(), new.id())
    );
    // A process holding the old key only follows through the record.
    let mut node = Keyring::new(old.clone());
    node.learn(&listed(&[&old, &new]), &[down]).unwrap();
    assert_eq!(node.current(), new.id());
    let resealed = ring.reseal("b", &sealed, new.id()).unwrap();
    assert_eq!(sealed_by(&resealed), Some(new.id()));
    assert_eq!(node.open("b", &resealed).unwrap().as_slice(), b"v");
    assert!(sealed_by(&ring.reseal("b", "plain", new.id()).unwrap()).is_some());
    assert!(
        ring.reseal("c", &sealed, new.id()).is_err(),
        "refused stays refused"
    );

    // Run again: it resumes, recording nothing.
    let mut again = Keyring::new(old.clone());
    let resumed = again
        .begin_rotation(&listed(&[&old, &new]), new.clone())
        .unwrap();
    assert!(resumed.record.is_none() && resumed.previous == old.id());
    // Without the current key, or back to an earlier key: refused.
    let third = MasterKey::generate().unwrap();
    let e = Keyring::new(third.clone())
        .begin_rotation(&listed(&[&old, &new]), MasterKey::generate().unwrap())
        .unwrap_err();
    assert_eq!(e.option(), "master-key-file");
    let e = Keyring::new(new.clone())
        .begin_rotation(&listed(&[&old, &new]), old.clone())
        .unwrap_err();
    assert_eq!(e.option(), "new-key-file");
}

#[test]
fn status_counts_values_by_key_and_a_key_goes_only_when_unused() {
    let (old, new) = (
        MasterKey::generate().unwrap(),
        MasterKey::generate().unwrap(),
    );
    let keys = listed(&[&old, &new]);
    let mut ring = Keyring::new(old.clone());
    ring.insert(new.clone());
    let a = ring.seal("a", b"1");
    let b = ring.seal_with(new.id(), "b", b"2").unwrap();
    let status = SecretsStatus::count(&keys, &[], [a.as_str(), b.as_str(), "plain"]);
    assert_eq!(status.current, new.id());
    assert_eq!(status.plain_text, 1);
    assert_eq!(
        status.keys.iter().map(|k| k.values).collect::<Vec<_>>(),
        [1, 1]
    );
    assert!(matches!(
        status.may_forget(old.id()),
        Err(ForgetRefused::InUse {
            values: 1,
            current: false,
            ..
        })
    ));
    assert!(
        status
            .may_forget(new.id())
            .unwrap_err()
            .to_string()
            .contains("seals new ones")
    );
    assert!(matches!(
        status.may_forget("nope"),
        Err(ForgetRefused::Unknown { .. })
    ));
    let later = SecretsStatus::count(&keys, &[], [b.as_str()]);
    assert_eq!(later.may_forget(old.id()), Ok(()));
}
