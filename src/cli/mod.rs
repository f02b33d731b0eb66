//! The command line: one clap argument type per subcommand, each converted into the plain
//! settings its library takes.

pub(crate) mod check;
pub(crate) mod demo;
pub(crate) mod emulate;
pub(crate) mod loadtest;
pub(crate) mod serve;
pub(crate) mod simulate;
