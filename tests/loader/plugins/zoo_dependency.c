/* A library the missing-dependency zoo plugin links against; it is built
 * into a directory that is on no search path, so dlopen fails for it. */
__attribute__((visibility("default"))) int zoo_dependency_answer(void) {
  return 42;
}
