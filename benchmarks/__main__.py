from benchmarks.runner import main

main()
