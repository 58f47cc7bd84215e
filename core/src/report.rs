//! One line for an error and its causes, each said once.
//!
//! Many errors here name their cause in their own message ("cannot listen
//! on 127.0.0.1:2222: Address already in use") and also return it as their
//! `source()`, so that logs printing only the message lose nothing. Walking
//! such a chain naively prints the cause twice; [`one_line`] leaves out a
//! cause whose text the line already holds.

use std::error::Error;

/// The error's message, then each cause not already said, joined by
/// `": "`, on one line.
pub fn one_line(err: &(dyn Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = next.source();
    }
    line.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[derive(Debug)]
    struct Outer(std::io::Error, bool);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.1 {
                write!(f, "cannot listen on 127.0.0.1:1: {}", self.0)
            } else {
                f.write_str("cannot listen on 127.0.0.1:1")
            }
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    fn in_use() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use")
    }

    #[test]
    fn a_cause_the_message_names_is_said_once() {
        let err = Outer(in_use(), true);
        assert_eq!(
            one_line(&err),
            "cannot listen on 127.0.0.1:1: Address already in use"
        );
    }

    #[test]
    fn a_cause_the_message_leaves_out_is_added() {
        let err = Outer(in_use(), false);
        assert_eq!(
            one_line(&err),
            "cannot listen on 127.0.0.1:1: Address already in use"
        );
    }

    #[test]
    fn lines_become_one() {
        let err = std::io::Error::other("first\nsecond");
        assert_eq!(one_line(&err), "first second");
    }
}
