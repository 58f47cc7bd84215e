//! `--image`: an OCI image reference as the container runtimes read it
//! (`[REGISTRY[:PORT]/]PATH[:TAG][@ALGORITHM:DIGEST]`, the grammar of the
//! distribution project's `reference` package), checked before anything
//! is written, so that a typo is an error here rather than a pod stuck in
//! `InvalidImageName` or `ErrImagePull`.

/// Checks `image`; the error says what is wrong with it.
pub fn check(image: &str, placeholder: &str) -> Result<(), String> {
    if image.is_empty() {
        return Err("empty".into());
    }
    if image == placeholder {
        return Err(format!(
            "{image} is the sidecar spec's placeholder, which no registry serves: build the \
             image from deploy/container and push it where the cluster pulls from"
        ));
    }
    if let Some(c) = image.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{image:?} contains {c:?}: not an image reference"));
    }
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        check_digest(digest).map_err(|e| format!("{image:?}: digest {digest:?}: {e}"))?;
    }
    // A tag is after the last ':' that follows the last '/' (a ':' before
    // it is a registry's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        check_tag(tag).map_err(|e| format!("{image:?}: tag {tag:?}: {e}"))?;
    }
    check_name(name).map_err(|e| format!("{image:?}: {e}"))
}

/// `[REGISTRY/]PATH`: the repository, lowercase.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("no repository name".into());
    }
    if name.len() > 255 {
        return Err("the repository name is longer than 255 characters".into());
    }
    let mut components: Vec<&str> = name.split('/').collect();
    // As the runtimes decide: the first component is a registry when it
    // has a '.' or a ':', or is localhost.
    if components.len() > 1 {
        let first = components[0];
        if first.contains(['.', ':']) || first == "localhost" {
            check_registry(first)?;
            components.remove(0);
        }
    }
    for component in components {
        check_path_component(component)?;
    }
    Ok(())
}

/// `host[:port]`, the host's labels of letters, digits and inner '-'.
fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    if let Some(port) = port {
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("registry {registry:?}: the port is not a number"));
        }
    }
    let good_label = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !host.split('.').all(good_label) {
        return Err(format!("registry {registry:?} is not a host name"));
    }
    Ok(())
}

/// One path component: lowercase letters and digits, separated by one
/// '.', one or two '_', or any number of '-'.
fn check_path_component(component: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "repository path component {component:?}: lowercase letters and digits, separated by \
             '.', '_', '__' or dashes"
        )
    };
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Err(bad());
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = separator == "."
            || separator == "_"
            || separator == "__"
            || separator.bytes().all(|b| b == b'-');
        if !ok {
            return Err(bad());
        }
    }
    Ok(())
}

/// A tag: a word character, then up to 127 of word characters, '.', '-'.
fn check_tag(tag: &str) -> Result<(), String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    if bytes.is_empty() || bytes.len() > 128 {
        return Err("1 to 128 characters".into());
    }
    if !word(bytes[0]) || !bytes.iter().all(|&b| word(b) || b == b'.' || b == b'-') {
        return Err("letters, digits, '_', '.' and '-', not starting with '.' or '-'".into());
    }
    Ok(())
}

/// `ALGORITHM:HEX`; a sha256 digest has 64 lowercase hexadecimal digits.
fn check_digest(digest: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err("not ALGORITHM:HEX (sha256:...)".into());
    };
    let good_algorithm = !algorithm.is_empty()
        && algorithm
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b));
    if !good_algorithm {
        return Err(format!("{algorithm:?} is not an algorithm name"));
    }
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if algorithm == "sha256" && !(hex.len() == 64 && hex.bytes().all(lower_hex)) {
        return Err("a sha256 digest is 64 lowercase hexadecimal digits".into());
    }
    if hex.len() < 32 || !hex.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err("the digest is at least 32 hexadecimal digits".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACEHOLDER: &str = "ghcr.io/tlc-project/tlcd:0.1.0";

    #[test]
    fn references_the_runtimes_take_are_taken() {
        let sha = "a".repeat(64);
        for image in [
            "tlcd",
            "tlcd:1",
            "registry.example.com/ml/tlcd:0.1.0",
            "localhost:5000/tlcd",
            "localhost/tlcd:dev",
            "registry.example.com:5000/a/b__c/d-e--f/tlcd:v1.2_rc-1",
            "ghcr.io/tlc-project/tlcd:0.2.0",
            &format!("registry.example.com/tlcd@sha256:{sha}"),
            &format!("registry.example.com/tlcd:1@sha256:{sha}"),
        ] {
            assert_eq!(check(image, PLACEHOLDER), Ok(()), "{image}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        for (image, reason) in [
            ("", "empty"),
            (PLACEHOLDER, "placeholder"),
            ("a b", "contains ' '"),
            ("registry.example.com/TLCD:1", "lowercase"),
            ("registry.example.com/tlcd:", "tag"),
            ("registry.example.com/tlcd:-1", "tag"),
            ("registry.example.com/tlcd@sha256:abc", "64 lowercase"),
            ("registry.example.com/tlcd@md5", "ALGORITHM:HEX"),
            ("registry.example.com//tlcd", "path component"),
            ("registry.example.com:http/tlcd", "port"),
            ("-registry.example.com/tlcd", "host name"),
            ("tlcd.", "path component"),
        ] {
            match check(image, PLACEHOLDER) {
                Err(e) => assert!(e.contains(reason), "{image}: {e}"),
                Ok(()) => panic!("{image:?} taken"),
            }
        }
    }
}
