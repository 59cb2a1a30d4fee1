# Warnings used for every motley target (see docs/architecture.md, Conventions). CI adds
# -DCMAKE_COMPILE_WARNING_AS_ERROR=ON so that any of these fails the build.
set(MOTLEY_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual -Wold-style-cast
  -Wcast-align -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
  -Wduplicated-cond -Wlogical-op -Wsuggest-override)
