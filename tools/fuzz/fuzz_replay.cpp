// Replays inputs through the compiler fuzzer's body without libFuzzer, so that the regression
// corpus runs in `bazel test` with any compiler: fuzz_replay FILE_OR_DIRECTORY...
// Each file's name is printed before it runs, so a crash names the input that caused it.
#include "tools/fuzz/CompilerFuzzTarget.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code error;
    if (fs::is_directory(argv[i], error)) {
      for (const fs::directory_entry &entry : fs::directory_iterator(argv[i]))
        if (!entry.is_directory()) files.push_back(entry.path());
    } else if (fs::exists(argv[i], error)) {
      files.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: fuzz_replay FILE_OR_DIRECTORY... (found no input files)\n");
    return 2;
  }
  std::sort(files.begin(), files.end());
  for (const fs::path &file : files) {
    std::printf("fuzz_replay: %s\n", file.c_str());
    std::fflush(stdout);
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gpt::fuzz::runCompilerOnInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_replay: %zu inputs ran without a crash\n", files.size());
  return 0;
}
