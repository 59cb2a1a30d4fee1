# Warnings used for every motley target (see docs/architecture.md, Conventions). CI adds
# -DCMAKE_COMPILE_WARNING_AS_ERROR=ON so that any of these fails the build.
# The g++-only ones are generator expressions (clang builds the sanitizer and fuzzing tree of
# scripts/test.sh): -Wduplicated-cond and -Wlogical-op do not exist in clang, and clang's
# -Wdouble-promotion also flags every float-to-double assignment, which g++'s does not.
set(MOTLEY_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual -Wold-style-cast
  -Wcast-align -Wnull-dereference $<$<CXX_COMPILER_ID:GNU>:-Wdouble-promotion> -Wformat=2
  -Wimplicit-fallthrough
  $<$<CXX_COMPILER_ID:GNU>:-Wduplicated-cond> $<$<CXX_COMPILER_ID:GNU>:-Wlogical-op>
  -Wsuggest-override)
