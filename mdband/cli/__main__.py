from mdband.cli import main

main()
