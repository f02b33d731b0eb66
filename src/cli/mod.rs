//! The command line: one clap argument type per subcommand, each converted into the plain
//! settings its library takes.

pub(crate) mod serve;
