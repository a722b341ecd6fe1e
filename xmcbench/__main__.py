from xmcbench.cli import main

main()
